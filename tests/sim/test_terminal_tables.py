"""Terminal tables fit 100 columns (issue 41): heads wrap to their cells, a table still too wide
is cut into blocks of columns with the rows' names repeated; a narrow one is one block."""

import re

from sim.tables import TERMINAL_WIDTH, terminal_table

HEADS = [f"a long metric head number {i} (median)" for i in range(12)]


def _wide_rows():
    return [
        {"policy": name, "trace": trace, **{h: 1000.0 + i for i, h in enumerate(HEADS)}}
        for name, trace in (("dynamic", "stationary"), ("nnabla-legacy", "spikes"))
    ]


def test_a_wide_table_is_cut_into_blocks_that_fit_and_repeat_the_names():
    columns = ["policy", "trace", *HEADS]
    text = terminal_table(_wide_rows(), columns)
    lines = text.splitlines()
    assert max(map(len, lines)) <= TERMINAL_WIDTH
    blocks = text.split("\n\n")
    assert len(blocks) > 1
    for block in blocks:  # each block names its rows
        assert "nnabla-legacy" in block and "spikes" in block and "stationary" in block
    for i in range(12):  # every value is shown once
        assert len(re.findall(rf"\b{1000 + i}\b", text)) == 2  # one per row


def test_a_table_that_fits_is_one_block_as_tabulate_lays_it_out():
    from tabulate import tabulate

    rows = [{"policy": "dynamic", "skipped": 3.0}]
    text = terminal_table(rows, ["policy", "skipped"])
    assert "\n\n" not in text
    assert text == tabulate(
        [["dynamic", "3"]],
        headers=["policy", "skipped"],
        tablefmt="simple",
        colalign=["left", "right"],
        disable_numparse=True,
    )


def test_a_head_wraps_to_its_cells_not_past_its_longest_word():
    rows = [{"n": 1.0}]
    text = terminal_table(rows, ["n"], ["steps to 2x of safe (median)"])
    head = text.splitlines()[:-2]
    assert max(len(line.strip()) for line in head) == len("(median)")
    assert " ".join(line.strip() for line in head) == "steps to 2x of safe (median)"
