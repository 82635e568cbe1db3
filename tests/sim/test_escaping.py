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
