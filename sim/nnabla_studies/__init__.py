"""Programs that train real nnabla models: the only part of ``sim`` that imports nnabla."""
