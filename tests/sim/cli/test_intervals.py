"""``dls simulate`` and ``dls tune`` print the predictive interval of skipped steps and of the
below-half share, with its level and the recordings it rests on (issue 49, part 2)."""

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
    assert "for a run in a batch order no recording saw, over 2 recordings" in text
    each = [simulate(DynamicScale(), t, jitter=0.0).metrics["skipped"][0] for t in (a, b)]
    assert each[0] != each[1]
    found = re.search(
        r"skipped steps per run (\S+) to (\S+) at level (\S+) \(each replayed exactly: "
        r"(\S+), (\S+)\)",
        text,
    )
    low, high, level, *replayed = found.groups()
    low, high, replayed = float(low), float(high), [float(v) for v in replayed]
    assert level == f"{LEVEL:.0%}" and replayed == each
    assert low <= min(each) and max(each) <= high and high > low
    assert "share of steps below half the safe scale " in text


def test_one_recording_prints_a_level_and_says_it_rests_on_one(tmp_path, capsys):
    _recording(tmp_path, "a", spikes=[5, 9])
    assert main(["simulate", "--trace", str(tmp_path / "a.npz"), "--runs", "8", "-q"]) == 0
    text = _interval_text(capsys.readouterr().out)
    assert f"at level {LEVEL:.0%} (replayed exactly: " in text
    assert "over 1 recording (their variation within" in text
    assert "no level" not in text


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
    words = " ".join(out.split())
    assert words.count("over 2 recordings") == 2
    assert words.count("skipped steps per run") >= 2 and f"at level {LEVEL:.0%}" in words
