"""Long pages open with their summary (issue 52): the nnabla page's changes are one table, a row
a change (nnabla's behaviour, ours, the tests), each row linking its section of details and
naming test files that exist; the report page opens with what to pick and why."""

import re

from tests.docs.pages import DOCS
from tests.paths import ROOT


def section(text: str, heading: str) -> str:
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_the_nnabla_pages_changes_are_a_table_of_rows_with_details_and_tests():
    text = (DOCS / "guide" / "nnabla.md").read_text()
    changes = section(text, "## What changes from nnabla's updater")
    rows = [r for r in changes.splitlines() if r.startswith("| [")]
    headings = re.findall(r"^### (.+)$", section(text, "## Each change in detail"), re.M)
    assert len(rows) == len(headings) >= 10
    assert len(changes.split()) < 600  # the summary; the details follow it
    for row, heading in zip(rows, headings):
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells) == 4 and all(cells), row
        assert cells[0].startswith(f"[{heading}](#"), (cells[0], heading)
        for name in re.findall(r"`([\w/]+\.py)`", cells[3]):
            folder = "tests/updater/" if "/" in name else "tests/updater/driver/"
            assert (ROOT / folder / name).is_file(), name


def test_the_report_page_opens_with_a_short_summary():
    text = (DOCS / "simulator" / "report.md").read_text()
    first = text[text.index("\n## ") + 1 :]
    assert first.startswith("## In short\n")
    summary = section(text, "## In short")
    assert len(summary.split()) < 150 and summary.count("\n- **") >= 3
