"""``dls simulate`` and ``dls tune`` print the predictive interval of skipped steps and of the
below-half share, with its level and the recordings it rests on (issue 49, B)."""

import re

import numpy as np

from sim.cli.main import main
from sim.replay.run import simulate
from sim.replay.spread import LEVEL
from updater.policy import DynamicScale
from updater.trace import Trace


def _recording(tmp_path, stem: str, spikes, steps: int = 60) -> Trace:
    """A recording of model ``m`` whose ``k``-th step in ``spikes`` has |g| = 4 * 2**k: each
    overflows at 2**(15 - k) and above."""
    rng = np.random.default_rng(len(spikes))
    rows = [rng.uniform(2.0**-12, 2.0**-4, 50) for _ in range(steps)]
    for k, t in enumerate(spikes):
        rows[t] = np.concatenate([rows[t], [4.0 * 2.0**k]])
    trace = Trace.from_steps(rows, name="m")
    trace.save(tmp_path / f"{stem}.npz")
    return trace


def _interval_text(out: str) -> str:
    """The ``interval:`` line(s) of ``out``, unwrapped."""
    lines = out.splitlines()
    first = next(i for i, x in enumerate(lines) if x.startswith("interval: "))
    text = [lines[first]]
    for x in lines[first + 1 :]:
        if not x.startswith("  "):
            break
        text.append(x.strip())
    return " ".join(text)


def test_two_recordings_give_a_90_percent_interval_holding_both(tmp_path, capsys):
    a = _recording(tmp_path, "a", spikes=[5, 9, 20, 30, 41, 50])
    b = _recording(tmp_path, "b", spikes=[12, 25])
    argv = ["simulate", "--trace", str(tmp_path / "a.npz"), "--trace", str(tmp_path / "b.npz")]
    assert main([*argv, "--runs", "8", "-q"]) == 0
    text = _interval_text(capsys.readouterr().out)
    assert text.endswith(f"level {LEVEL:.0%}, over 2 recordings")
    each = [simulate(DynamicScale(), t, jitter=0.0).metrics["skipped"][0] for t in (a, b)]
    assert each[0] != each[1]
    found = re.search(
        r"skipped steps per run (\S+) to (\S+) \(exactly replayed: (\S+), (\S+)\)", text
    )
    low, high, *replayed = (float(v) for v in found.groups())
    assert replayed == each
    assert low <= min(each) and max(each) <= high and high > low
    assert "share of steps below half the safe scale " in text


def test_one_recording_claims_no_level_and_says_what_it_cannot_give(tmp_path, capsys):
    _recording(tmp_path, "a", spikes=[5, 9])
    assert main(["simulate", "--trace", str(tmp_path / "a.npz"), "--runs", "8", "-q"]) == 0
    out = capsys.readouterr().out
    text = _interval_text(out)
    assert "no level: 1 recording, the jittered runs' 5-95% spread" in text
    assert "%" not in text.split("no level")[0].split("skipped")[0]
    words = " ".join(out.split())
    assert "note: one recording is one sample of training" in words
    assert "pass both (--trace A --trace B) for a 90% interval" in words


def test_tune_prints_the_interval_of_the_chosen_and_the_default(tmp_path, capsys):
    _recording(tmp_path, "a", spikes=[5, 9, 20])
    _recording(tmp_path, "b", spikes=[12])
    argv = ["tune", "--trace", str(tmp_path / "a.npz"), "--trace", str(tmp_path / "b.npz")]
    assert main([*argv, "--runs", "4", "-q"]) == 0
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.startswith("interval: ")]
    assert [x.split(":")[1].strip() for x in lines] == [
        "chosen, m (2 recordings)",
        "default, m (2 recordings)",
    ]
    assert " ".join(out.split()).count(f"level {LEVEL:.0%}, over 2 recordings") == 2
