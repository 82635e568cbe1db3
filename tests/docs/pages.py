"""The documentation's pages as data: their code blocks (with the ``docs-test`` markers that say
how a block runs) and their paragraphs (with the ``from`` markers that name a number's source).

Markers are HTML comments on the line before a block or at the start of a paragraph:

- ``<!-- docs-test: skip REASON -->``: the block cannot run here (a GPU, an install);
- ``<!-- docs-test: replace "A" "B" -->``: run the block with A replaced by B (a small setting);
- ``<!-- docs-test: file NAME -->``: write the block to NAME for a later block to run;
- ``<!-- from: FILE [FILE ...] -->``: every number of the paragraph appears in one of the files.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

from tests.paths import ROOT

DOCS = ROOT / "docs"
SNIPPETS = DOCS / "snippets"
"""Markdown that pages include (pymdownx.snippets), not pages themselves."""
PAGES = sorted(
    [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    + [p for p in DOCS.rglob("*.md") if SNIPPETS not in p.parents]
)
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
_MARK = re.compile(r"<!-- docs-test: (skip|replace|file)\s*(.*?) -->")
_SNIPPET = re.compile(r'^--8<-- "([^"]+)"\n', re.M)


def page_id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@dataclass
class Block:
    lang: str
    code: str
    skip: Optional[str] = None  # the reason
    replace: List[Tuple[str, str]] = field(default_factory=list)
    file: Optional[str] = None

    def runnable_code(self) -> str:
        code = self.code
        for old, new in self.replace:
            assert old in code, f"docs-test: replace {old!r}: not in the block"
            code = code.replace(old, new)
        return code


def expand_snippets(text: str) -> str:
    """pymdownx.snippets' ``--8<-- "path"`` lines (relative to the checkout) replaced by the
    file, as MkDocs does (a snippet stands outside code fences: ``ruff format`` formats the
    Python blocks of Markdown files and would break the line inside one)."""
    return _SNIPPET.sub(lambda m: (ROOT / m.group(1)).read_text(), text)


def blocks(path: Path) -> List[Block]:
    """The fenced code blocks of a page in page order, snippets expanded, markers applied."""
    text = expand_snippets(path.read_text())
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 3)[-3:]
        block = Block(match.group(1), match.group(2))
        for line in reversed(before):
            mark = _MARK.fullmatch(line.strip())
            if not mark:
                break
            kind, arg = mark.groups()
            if kind == "skip":
                block.skip = arg
            elif kind == "file":
                block.file = arg
            else:
                old, new = re.fullmatch(r'"(.*?)" "(.*?)"', arg).groups()
                block.replace.append((old, new))
        found.append(block)
    return found


def paragraphs(path: Path) -> List[str]:
    """The prose of a page split at blank lines, fenced code left out."""
    text = _FENCE.sub("\n", path.read_text())
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
