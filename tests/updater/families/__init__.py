"""The model-family matrix of issue 48: each family the users train (:data:`FAMILIES`), trained
a few steps on every ``finite_check`` path and compared with a plain nnabla loop, nnabla's own
updater and a float32 run (``runs.py``), and resumed in a new process."""

from .language import language_model, lstm
from .models import gan, mlp, resnet, segmentation, vae

FAMILIES = {
    "mlp": mlp,
    "resnet": resnet,
    "lm": language_model,
    "lstm": lstm,
    "segmentation": segmentation,
    "vae": vae,
    "gan": gan,
}
"""Builders by family name: ``FAMILIES[name](type_config)`` builds it afresh."""
