"""Recording a step for a :class:`updater.trace.GradientRecorder`, as a hook the driver calls:
:class:`~updater.driver.recording.hook.Recording` gives the forward pass its hook before the
attempts and, after them, probes the recorded step (:mod:`.probes`, the float32 reference graph,
:mod:`.forward_peak`) and hands it to the recorder. It owns the probe state and reads the
updater's option ``probes`` (:class:`~updater.driver.probe_options.Probes`);
the attempts keep the retry logic and the verdict."""

from ..probe_options import Probes
from .hook import Recording

__all__ = ["Probes", "Recording"]
