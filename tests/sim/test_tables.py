"""The project's one markdown table writer (sim.tables) and every table the project writes,
read back with a markdown parser (issue 31)."""

import json

import pytest

from sim.report.tables import share_table
from sim.tables import (
    escape_cell,
    format_percent,
    format_value,
    markdown_grid,
    markdown_table,
    with_percents,
)
from tests.markdown_tables import assert_tables_render, parsed_tables, table_blocks
from tests.paths import ROOT


def test_a_pipe_inside_a_cell_is_escaped_and_the_row_keeps_its_cells():
    # reports/README.md held "mean |predicted - measured|" unescaped: the row lost its verdict
    rows = [
        {"goal": "mean |predicted - measured| <= 5", "result": "mean |error| 3.2", "met": "met"}
    ]
    text = markdown_table(rows, ["goal", "result", "met"])
    assert assert_tables_render(text) == 1
    assert parsed_tables(text)[0][1] == [
        "mean |predicted - measured| <= 5",
        "mean |error| 3.2",
        "met",
    ]
    assert escape_cell("a\nb | c") == "a b \\| c"
    assert escape_cell(escape_cell("|")) == "\\|"  # escaping twice changes nothing


def test_numeric_columns_are_right_aligned_and_text_columns_left():
    rows = [
        {"policy": "dynamic", "skipped": 7.0, "signal_lost": "0.0700%", "final_scale": 4096.0},
        {"policy": "legacy", "skipped": 0, "signal_lost": "<0.001%", "final_scale": 8.0},
        {"policy": "none", "skipped": 1, "signal_lost": "n/a", "final_scale": float("nan")},
    ]
    lines = markdown_table(rows, list(rows[0])).splitlines()
    assert lines[1] == "|---|---:|---:|---:|"
    assert markdown_grid(["a", "b"], [["x", "1.0x"]], align="ll").splitlines()[1] == "|---|---|"
    with pytest.raises(ValueError, match="align"):
        markdown_grid(["a", "b"], [["x", "y"]], align="c")
    with pytest.raises(ValueError, match="2 cells"):
        markdown_grid(["a", "b"], [["x"]])


def test_one_percent_format_with_a_floor():
    # one column held 4.91e-05%, 0.0009669% and 0.2325%
    assert [format_percent(v) for v in (4.91e-7, 9.669e-6, 0.002326, 0.0004)] == [
        "<0.001%",
        "<0.001%",
        "0.233%",
        "0.0400%",
    ]
    assert format_percent(1.0) == "100%" and format_percent(0.0) == "0%"
    assert format_percent(-4e-7) == ">-0.001%" and format_percent(None) == "n/a"
    assert with_percents([{"a": 0.5, "b": "x"}], ["a", "b"]) == [{"a": "50.0%", "b": "x"}]


def test_every_power_of_two_scale_prints_as_2_to_the_k():
    # a "final scale (median)" column mixed 8 and 2^4
    assert [format_value(v, name="final_scale") for v in (8.0, 16.0, 1.0, 3.0)] == [
        "2^3",
        "2^4",
        "2^0",
        "3",
    ]
    assert format_value(8, name="scale") == "2^3"
    assert format_value(2.0, name="growth_factor") == "2"  # a factor is not a scale
    assert format_value(2.0**-8, name="backoff_factor") == "2^-8"
    assert format_value(8, name="skipped") == "8" and format_value(8) == "8"


def test_share_tables_say_what_they_hold():
    text = share_table([{"lost_a": 0.5}], {"lost_a": "signal lost, a"}, ["lost_a"])
    assert text.splitlines()[0] == "| signal lost, a |" and "| 50.0% |" in text


@pytest.mark.parametrize("name", ["README.md", "train.md", "amp.md", "benchmarks.md"])
def test_every_committed_report_renders_its_tables(name):
    """Each table of the committed reports renders with every row's cells."""
    assert assert_tables_render((ROOT / "reports" / name).read_text()) >= 1


def test_the_committed_report_names_its_configuration_in_json():
    line = next(x for x in (ROOT / "reports/README.md").read_text().splitlines() if "JSON" in x)
    config = json.loads(line.split("Configuration (JSON): `")[1].split("`")[0])
    assert config["steps"] == 10000 and config["real_traces"] == "shipped"


def test_the_studies_tables_render_with_accuracy_as_percent():
    from sim.nnabla_studies import amp_evidence, demo

    row = {
        "variant": "float16 | ours",
        "test_accuracy": 0.969,
        "skipped_steps": 0,
        "batches": 600,
        "seconds": 12.04,
        "flushed_share": 0.035,
        "final_scale": 32768.0,
    }
    text = demo.format_table([row])
    assert assert_tables_render(text) == 1
    assert parsed_tables(text)[0][1] == ["float16 | ours", "96.9%", "0", "600", "3.50%", "2^15"]
    assert "12.0" in demo.format_table([row], terminal=True)  # wall time: terminal only
    row = {
        "inputs": "0-1",
        "variant": "rewrite",
        "accuracy": 0.933,
        "final_loss": 0.25,
        "skipped": 2,
        "stats_finite": True,
        "half_share": 0.9,
        "seconds": 3.0,
    }
    text = amp_evidence.format_table([row])
    assert assert_tables_render(text) == 1 and "| 93.3% |" in text


def test_the_cli_tables_render(capsys):
    from sim.cli.main import main

    assert main(["simulate", "--policy", "dynamic", "--steps", "50", "--runs", "2"]) == 0
    argv = ["sweep", "--policy", "static", "--grid", "scale=2**15,2**3", "--steps", "20"]
    assert main([*argv, "--runs", "1", "--families", "stationary"]) == 0
    out = capsys.readouterr().out
    assert table_blocks(out) == []  # terminal tables, not markdown (issue 30)
    words = [" ".join(line.split()) for line in out.splitlines()]
    assert sum(w.startswith("policy trace runs overflows skipped") for w in words) == 1
    assert sum(w.startswith("scale trace runs overflows skipped") for w in words) == 1
