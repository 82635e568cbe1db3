"""Markdown tables read back with a real parser (markdown-it-py, GFM tables), as a reader's
viewer reads them."""

from __future__ import annotations

import re
from typing import List

from markdown_it import MarkdownIt

PARSER = MarkdownIt("commonmark").enable("table")


def _source_cells(line: str) -> List[str]:
    """The cells of one table line as written: split at unescaped ``|``, unescaped."""
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def parsed_tables(text: str) -> List[List[List[str]]]:
    """Every table the parser finds: rows of cells (their inline text, unescaped)."""
    tables, row = [], None
    for tok in PARSER.parse(text):
        if tok.type == "table_open":
            tables.append([])
        elif tok.type == "tr_open":
            row = []
            tables[-1].append(row)
        elif tok.type == "inline" and row is not None:
            row.append(tok.content)
        elif tok.type == "tr_close":
            row = None
    return tables


def assert_tables_render(text: str) -> int:
    """Check that every table line of ``text`` renders as written; return the table count.

    Each table's rows hold as many cells as its header, the parser reads the cells the writer
    wrote (an unescaped ``|`` inside a cell would split it, and the parser drops the extra
    cells), and no line starting with ``|`` is left outside a table.
    """
    lines = text.splitlines()
    covered = set()
    tokens = PARSER.parse(text)
    opens = [t for t in tokens if t.type == "table_open"]
    for tok, rows in zip(opens, parsed_tables(text)):
        start, end = tok.map
        covered.update(range(start, end))
        source = [line for j, line in enumerate(lines[start:end]) if j != 1]
        assert len(source) == len(rows), (source, rows)
        width = len(rows[0])
        for line, cells in zip(source, rows):
            written = _source_cells(line)
            assert len(written) == width, f"{len(written)} cells, header has {width}: {line}"
            assert written == cells, f"the parser reads {cells} from: {line}"
    stray = [line for j, line in enumerate(lines) if line.startswith("|") and j not in covered]
    assert not stray, f"lines outside any table: {stray[:3]}"
    return len(opens)


def table_blocks(text: str) -> List[str]:
    """The runs of consecutive lines starting with ``|`` in ``text`` (terminal output prints
    tables right under other lines), each a markdown document of its own."""
    blocks, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            blocks.append("\n".join(current))
            current = []
    return blocks
