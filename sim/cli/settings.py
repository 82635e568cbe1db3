"""Policies from the ``dls`` command line: ``--policy``, ``--set`` and ``--grid``, and their help.

The ``--policy`` help and the list of policies at the end of ``dls simulate --help`` and
``dls sweep --help`` are generated from :mod:`updater.policy.presets`
(:func:`~updater.policy.presets.names`, :data:`~updater.policy.presets.PRESETS`,
:func:`~updater.policy.presets.make_policy`): a new preset or policy class shows up there without
editing the command line. Bad settings are reported through ``parser.error`` (exit status 2, one
line naming the setting).
"""

from __future__ import annotations

import math
import re
import textwrap
from typing import Dict, List, Sequence

from sim.cli.names import did_you_mean
from sim.report.tables import describe_policy
from updater.policy.presets import PRESETS, make_policy, names, setting_types

HELP_WIDTH = 88
"""Width of the generated policy list (the width ``dls`` fills its descriptions to)."""


# ---------------------------------------------------------------- help


def _presets_and_classes():
    presets = [n for n in names() if n in PRESETS]
    return presets, [n for n in names() if n not in PRESETS]


def policy_help(default: str) -> str:
    """The ``--policy`` option's help: every preset and policy class :func:`names` accepts.

    >>> text = policy_help("dynamic")
    >>> "nnabla-legacy" in text, "HeadroomScale" in text, text.endswith("(default dynamic)")
    (True, True, True)
    """
    presets, classes = _presets_and_classes()
    return (
        f"a preset ({', '.join(presets)}) or a class ({', '.join(classes)}); the list "
        f"below gives each one's settings (default {default})"
    )


def policy_list() -> str:
    """Every preset with its class and settings, then every class with its defaults, for the
    end of ``--help`` (values as people write them; long lines wrapped)."""
    presets, classes = _presets_and_classes()
    lines = ["policies (--policy NAME; --set KEY=VALUE changes one setting):", "  presets:"]
    for title, group in ((None, presets), ("  classes, with their defaults:", classes)):
        if title:
            lines.append(title)
        for name in group:
            lines += textwrap.wrap(
                describe_policy(name, make_policy(name)),
                width=HELP_WIDTH,
                initial_indent="    ",
                subsequent_indent="        ",
                break_long_words=False,
                break_on_hyphens=False,
            )
    return "\n".join(lines)


# ---------------------------------------------------------------- settings


INT_LIMIT = 2**63
"""Int settings are held in int64 arrays (a simulation's many runs): ``|value| < 2**63``."""


def parse_number(text: str) -> float:
    """Parse ``1000``, ``0.5``, ``1e-3``, ``2**15``, ``2^15`` or ``2**-24`` to a finite float;
    anything else (``nan``, ``inf``, ``1e400``, ``10**400``, ``0**-1``) raises ``ValueError``.

    >>> parse_number("2^15"), parse_number("2**-24") == 2.0**-24, parse_number("0.5")
    (32768.0, True, 0.5)
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*(?:\*\*|\^)\s*(-?\d+)\s*", text)
    try:
        value = float(m.group(1)) ** int(m.group(2)) if m else float(text)
    except (OverflowError, ZeroDivisionError):
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {text!r}")
    return value


def _convert(parser, policy: str, key: str, text: str, types: Dict[str, type]):
    if key not in types:
        parser.error(
            f"unknown setting {key!r} for policy {policy}{did_you_mean(key, list(types))}; "
            f"accepted: {sorted(types)}"
        )
    if types[key] is bool:
        if text.strip().lower() not in ("true", "false"):
            parser.error(f"setting {key} needs true or false, got {text!r}")
        return text.strip().lower() == "true"
    try:
        value = parse_number(text)
    except ValueError:
        parser.error(f"setting {key} needs a finite number (e.g. 1000, 0.5, 2**15), got {text!r}")
    if types[key] is int:
        if value != int(value) or not -INT_LIMIT <= value < INT_LIMIT:
            parser.error(f"setting {key} needs an int from -2**63 to 2**63 - 1, got {text!r}")
        return int(value)
    return value


def _types(parser, policy: str) -> Dict[str, type]:
    try:
        return setting_types(policy)
    except ValueError as e:
        parser.error(str(e))


def parse_settings(parser, policy: str, pairs: Sequence[str]) -> Dict[str, object]:
    """``--set KEY=VALUE`` pairs as a dict; a key given twice is an error."""
    types = _types(parser, policy)
    out: Dict[str, object] = {}
    given: Dict[str, str] = {}
    for pair in pairs or ():
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep:
            parser.error(f"--set needs KEY=VALUE, got {pair!r}: write --set {key}=VALUE")
        if key in given:
            parser.error(f"--set {key} given twice ({given[key]} and {pair}); give it once")
        given[key] = pair
        out[key] = _convert(parser, policy, key, text, types)
    return out


def parse_grid(parser, policy: str, specs: Sequence[str]) -> Dict[str, List[object]]:
    """``--grid KEY=V1,V2,...`` specs as a dict of value lists; a key given twice is an error."""
    types = _types(parser, policy)
    grid: Dict[str, List[object]] = {}
    for spec in specs or ():
        key, sep, values = spec.partition("=")
        key = key.strip()
        if not sep or not values.strip():
            parser.error(
                f"--grid needs KEY=V1,V2,... (e.g. growth_interval=200,1000), got {spec!r}"
            )
        if key in grid:
            parser.error(
                f"--grid {key} given twice; list all its values in one --grid "
                f"(e.g. --grid {key}=1,2,3)"
            )
        grid[key] = [_convert(parser, policy, key, v, types) for v in values.split(",")]
    return grid


def build_policy(parser, name: str, settings: Dict[str, object]):
    """:func:`updater.policy.presets.make_policy`, its errors reported through ``parser.error``."""
    try:
        return make_policy(name, **settings)
    except (ValueError, TypeError) as e:
        parser.error(str(e))
