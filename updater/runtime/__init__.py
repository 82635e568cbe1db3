"""nnabla: what a training run sets up around the updater: the device context, the MPI
communicator, checkpoints."""
