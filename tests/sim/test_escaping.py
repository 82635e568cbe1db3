"""What the package writes cannot inject: CSV cells that start like a formula are inert, a
markdown table shows a name as text (no HTML, no markdown), and a name with an undecodable
byte prints; real files, real processes, a real markdown parser."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from sim.replay.layers import format_layer_needs, layer_needs
from sim.tables import markdown_table
from tests.markdown_tables import PARSER
from updater.trace import Trace
from updater.trace.recorder import GradientRecorder

DLS = str(Path(sys.executable).parent / "dls")
EVIL = "w`<img src=x onerror=alert(1)>|`"


def _html(markdown: str) -> str:
    return PARSER.render(markdown)


def test_a_layer_name_in_the_report_table_stays_text(tmp_path):
    rec = GradientRecorder(tmp_path / "t.npz", per_parameter=True)
    for step in range(4):
        rec.record(step, [np.full(8, 1e-3, np.float16)] * 2, 1.0, names=[EVIL, "b|c"])
    table = format_layer_needs(layer_needs(rec.trace()))
    html = _html(table)
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert f"<code>{EVIL.replace('<', '&lt;').replace('>', '&gt;')}</code>" in html
    assert "<code>b|c</code>" in html


def test_a_plain_cell_holds_no_html_and_keeps_its_cells():
    html = _html(markdown_table([{"k": EVIL, "n": -3}], ["k", "n"]))
    assert "<img" not in html and html.count("<td") == 2
    assert '<td style="text-align:right">-3</td>' in html


def test_a_trace_name_like_a_formula_is_inert_in_the_csv_and_numbers_stay_numbers(tmp_path):
    trace = Trace.from_steps([np.full(8, 1e-3)] * 30, name='=HYPERLINK("http://x","y")')
    path = trace.save(tmp_path / "t.npz")
    out = tmp_path / "s.csv"
    proc = subprocess.run(
        [DLS, "sweep", "--trace", path, "--grid", "hysteresis=1,2", "--runs", "1", "--csv", out],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(out.open()))
    assert '\'=HYPERLINK("http://x","y")' in {r["trace"] for r in rows}
    assert not any(r["trace"].startswith(("=", "+", "-", "@")) for r in rows)
    assert all(not r["hysteresis"].startswith("'") for r in rows)


def test_a_path_with_an_undecodable_byte_prints_after_writing(tmp_path):
    out = os.fsencode(tmp_path) + b"/s\xff.csv"
    env = dict(os.environ, PYTHONIOENCODING="utf-8")  # a terminal that refuses surrogates
    command = [os.fsencode(DLS), b"sweep", b"--grid", b"hysteresis=1,2", b"--runs", b"1"]
    proc = subprocess.run([*command, b"--csv", out], capture_output=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"wrote " + os.fsencode(tmp_path) + b"/s?.csv" in proc.stdout
    assert os.path.exists(out)


def test_a_trace_named_like_mathtext_is_plotted_as_it_is(tmp_path):
    path = Trace.from_steps([np.full(8, 1e-3)] * 30, name="$x^{$").save(tmp_path / "t.npz")
    plot = tmp_path / "p.png"
    command = [DLS, "simulate", "--trace", path, "--runs", "2", "--plot", plot]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.splitlines()[-1] == f"wrote {plot}" and plot.stat().st_size > 0


def test_escape_sequences_in_a_file_name_never_reach_the_terminal(tmp_path):
    out = tmp_path / "s\x1b[2J\x1b]0;title\x07.csv"
    shown = f"{tmp_path}/s\\x1b[2J\\x1b]0;title\\x07.csv"
    command = [DLS, "sweep", "--grid", "hysteresis=1,2", "--runs", "1", "--csv", out]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == f"wrote {shown}"
    out.write_text("mine\n")  # now the user's: refused, the name escaped in the error line
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.splitlines()[-1].startswith(
        f"dls sweep: error: --csv {shown}: not written by dls"
    )
    assert "\x1b" not in proc.stdout + proc.stderr and "\x07" not in proc.stdout + proc.stderr
