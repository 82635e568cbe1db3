"""nnabla: ``DynamicLossScalingUpdater`` and the collaborators it is composed of (the rounds and
attempts of an iteration, the gradient work, the finite-check paths in :mod:`.checks`, the
forward state, the recorder's hook in :mod:`.recording`), built from the options record."""
