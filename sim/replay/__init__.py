"""Policies replayed over traces: the engine, metrics, sweeps, the selection rule, checks."""
