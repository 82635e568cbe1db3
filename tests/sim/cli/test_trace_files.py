"""``dls`` on trace files it cannot use: unreadable, the wrong kind of file, impossible content;
each a one-line error (exit status 2)."""

import numpy as np
import pytest

from sim.cli.main import main
from sim.traces.families import make_trace
from tests.broken_files import rewrite, set_array
from tests.paths import SHIPPED_TRACES


def test_unreadable_trace_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros(2))
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--trace", str(bad)])
    assert exc.value.code == 2 and "not a gradient trace" in capsys.readouterr().err


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.write_text("not a trace"), "not an .npz archive"),
        (lambda p: p.mkdir(), "is a folder, not a trace file"),
        (lambda p: np.save(open(p, "wb"), np.zeros(3)), "a single NumPy array (.npy)"),
        (lambda p: np.savez(open(p, "wb"), x=np.zeros(2)), "lacks the arrays 'counts', 'zeros'"),
        (lambda p: p.write_bytes(b""), "the file is empty (0 bytes), not an .npz archive"),
        (
            lambda p: p.write_bytes((SHIPPED_TRACES / "digits_mlp.npz").read_bytes()[:5000]),
            "truncated or not an .npz archive",
        ),
    ],
)
@pytest.mark.parametrize("name", ["x.npz", "notes.txt"])
def test_unusable_trace_files_say_what_is_wrong(make, message, name, tmp_path, capsys):
    path = tmp_path / name
    make(path)
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--trace", str(path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert f"--trace {path}: " in err and message in err, err
    assert "GradientRecorder or Trace.save" in err
    assert "pickled" not in err and "not found" not in err


BAD_CONTENT = {
    "no steps": (set_array("counts", np.zeros((0, 121), np.int64)), "at least one step, got 0"),
    "all counts negative": (set_array("counts", np.full((50, 121), -1)), "counts must be >= 0"),
    "wrapped counts": (set_array("counts", np.full((50, 121), 2**64 - 1, np.uint64)), ">= 0"),
    "NaN absmax": (set_array("absmax", np.full(50, np.nan)), "absmax must hold finite"),
    "negative flush scales": (
        lambda p: rewrite(
            p,
            lambda a: a.update(
                flush_scales=np.full((50, 1), -(2.0**63)), flush_shares=np.full((50, 1), 0.5)
            ),
        ),
        "flush_scales must hold finite scales > 0",
    ),
    "an ANSI name": (set_array("name", np.array("\x1b[2Jx")), "name must be printable text"),
}


@pytest.mark.parametrize("command", ["simulate", "tune", "sweep"])
@pytest.mark.parametrize("case", list(BAD_CONTENT))
def test_traces_with_impossible_content_are_one_line_errors(case, command, tmp_path, capsys):
    path = make_trace("spikes", steps=50, seed=0).save(tmp_path / "t.npz")
    make, message = BAD_CONTENT[case]
    make(path)
    argv = [command, "--trace", str(path), "--runs", "2"]
    if command == "sweep":
        argv += ["--grid", "hysteresis=1,2"]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"--trace {path}: " in err and message in err, err
    assert "\x1b" not in err and "Traceback" not in err
