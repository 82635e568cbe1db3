"""nnabla: ``DynamicLossScalingUpdater`` and the collaborators it is composed of (the attempts of
an iteration, the gradient work, the finite checks, the forward state, the probes)."""
