"""The step's facts are one value from one call (issue 51): each attempt asks
``GradientWork.facts`` once, whose ``StepFacts`` answers every fact, the host fallbacks included,
so that ``NOT_CHECKED`` never leaves ``updater/driver/checks/``; the records of the step's core
are built by keyword only; the call-order guard is asked once per stage and ``unscale`` runs
once per ``update()``; on real cpu:half graphs."""

import ast
import dataclasses
import sys
from collections import Counter
from pathlib import Path

import nnabla as nn
import pytest

from tests.nnabla_models import TinyClassifier
from tests.paths import ROOT
from updater import DynamicLossScalingUpdater, DynamicScale
from updater.driver.attempts import Judged, Pending
from updater.driver.call_order import CallOrder
from updater.driver.checks import StepFacts
from updater.driver.recording.hook import Attempted

CHECKS = ROOT / "updater" / "driver" / "checks"


def names_used(path: Path) -> set:
    """Every name and attribute name ``path``'s code uses."""
    tree = ast.parse(path.read_text())
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
    }


def test_not_checked_never_leaves_the_checks_package():
    """Outside ``checks/`` no module of the library, the simulator or the benchmarks names it;
    inside, the paths answer it (the scan sees it there)."""
    unchecked = {"NOT_CHECKED", "NotChecked"}
    outside = [
        str(path.relative_to(ROOT))
        for folder in ("updater", "sim", "benchmarks")
        for path in (ROOT / folder).rglob("*.py")
        if CHECKS not in path.parents and names_used(path) & unchecked
    ]
    assert not outside
    assert names_used(CHECKS / "device.py") & unchecked


@pytest.mark.parametrize("record", [Pending, Judged, StepFacts, Attempted])
def test_the_records_of_the_step_refuse_positional_arguments(record):
    fields = [f.name for f in dataclasses.fields(record) if f.default is dataclasses.MISSING]
    with pytest.raises(TypeError, match="positional"):
        record(*([None] * len(fields)))


class Calls:
    """Calls into ``updater/`` during a block, by (module file stem, function name), and by
    those with their caller's (``sys.setprofile``)."""

    def __init__(self):
        self.calls = Counter()
        self.callers = Counter()

    def _profile(self, frame, event, arg):
        if event == "call" and "/updater/" in frame.f_code.co_filename:
            key = (Path(frame.f_code.co_filename).stem, frame.f_code.co_name)
            self.calls[key] += 1
            caller = frame.f_back.f_code
            self.callers[key + (Path(caller.co_filename).stem, caller.co_name)] += 1

    def __enter__(self):
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)


def _updater(path, **kwargs):
    nn.clear_parameters()
    m = TinyClassifier(f"facts_{path}")
    policy = DynamicScale(init_scale=2.0**13, hysteresis=1)
    feed = m.feeder(weights={1: 1e4}, nan_calls=[2])  # an overflow, then a bad batch
    return DynamicLossScalingUpdater(m.solver, m.loss, feed, policy=policy, finite_check=path)


@pytest.mark.nnabla
@pytest.mark.parametrize("path", ["numpy", "solver", "nnabla"])
def test_each_attempt_asks_its_facts_once(path):
    """Applied, overflowed and bad steps alike: one ``GradientWork.facts`` and one
    ``FiniteCheck.facts`` per attempt, none of the verdict's facts asked elsewhere."""
    u = _updater(path)
    outcomes = []
    for _ in range(3):
        with Calls() as seen:
            record = u.update()
        outcomes.append((record.update_applied, record.bad_batch))
        assert seen.calls[("gradient_work", "facts")] == record.attempts
        assert seen.calls[("base", "facts")] == record.attempts
        assert seen.calls[("rounds", "extras")] <= record.attempts  # only inside facts
    assert outcomes == [(True, False), (False, False), (False, True)]


@pytest.mark.nnabla
def test_the_call_order_is_asked_once_per_stage_and_unscale_runs_once():
    """A plain ``update()`` enters the call-order guard not at all (nothing pending, no inputs a
    ``step()`` left to compare) and unscales once; right after a ``step()`` without a data
    feeder it enters it once, to compare the inputs; the stages by hand enter it once each
    (``step()``: its check and its end)."""
    u = _updater("nnabla")
    with Calls() as seen:
        assert u.update().update_applied
    assert not [k for k in seen.callers if k[1] in vars(CallOrder) and k[2] == "updater"]
    unscales = [k for k in seen.callers if k[1] == "unscale" and k[3] != "unscale"]
    assert [seen.callers[k] for k in unscales] == [1]
    with Calls() as seen:
        u.backward()
        u.unscale()
        u.step()
    guard = {
        k[1]: n for k, n in seen.calls.items() if k[0] == "call_order" and k[1] in vars(CallOrder)
    }
    assert guard == {"start": 1, "require": 2, "end": 1}
    feed, u.data_feeder = u.data_feeder, None
    feed()
    u.backward()
    u.step()  # leaves the inputs it trained on for the next update() to compare
    feed()
    with Calls() as seen:
        u.update()
    guard = [k for k in seen.callers if k[1] in vars(CallOrder) and k[2] == "updater"]
    assert [(k[1], seen.callers[k]) for k in guard] == [("start_update", 1)]
