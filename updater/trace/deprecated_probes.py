"""The probe options ``GradientRecorder`` took before they became the updater's option
``probes`` (:class:`updater.Probes`): still accepted for one release, with a
``DeprecationWarning``; the recorder keeps them for the updater, which reads them when it is given
no ``probes`` (:func:`updater.driver.probe_options.probes_of`)."""

from __future__ import annotations

import warnings

from ..common.validation import check_bool, check_int

NEW_PROBES_SPELLING = "DynamicLossScalingUpdater(..., recorder=rec, probes=Probes(overflow=True))"
"""Where the probe options went from ``GradientRecorder``'s arguments: the updater's ``probes``."""
DEPRECATED_PROBES = {
    "probe_overflow": ("overflow", False),
    "measure_flush": ("flush", False),
    "flush_every": ("flush_every", 1),
    "probe_from_previous": ("from_previous", True),
    "forward_headroom": ("forward_headroom", False),
}
"""``GradientRecorder``'s deprecated arguments -> the field of :class:`updater.Probes` of the
same meaning and its default."""


def deprecated_probes(given: dict) -> dict | None:
    """The probe options ``given`` to ``GradientRecorder`` (argument -> value, None: not given)
    as :class:`updater.Probes`' fields (checked, the others at their defaults), warning
    ``DeprecationWarning`` naming the new spelling; None when none was given."""
    given = {k: v for k, v in given.items() if v is not None}
    if not given:
        return None
    warnings.warn(
        f"GradientRecorder({', '.join(f'{k}=...' for k in given)}) is deprecated and will be "
        f"removed in the next release: the probes are an option of the updater, "
        f"{NEW_PROBES_SPELLING} (from updater import Probes)",
        DeprecationWarning,
        stacklevel=3,
    )
    fields = {}
    for arg, (field, default) in DEPRECATED_PROBES.items():
        value = given.get(arg, default)
        fields[field] = check_int(arg, value, 1) if arg == "flush_every" else check_bool(arg, value)
    return fields
