"""The code's layout: no module over 400 lines (the packages, benchmarks, examples and tests),
the formatter's layout kept (no ``# fmt: skip`` but one per table of data, no ``# fmt: off``
region), no function of the packages over 60 lines, and ruff's complexity rules on at the
project's limits, suppressed only on the public signatures named here: a function over them is
split by job."""

import ast
import io
import re
import shutil
import subprocess
import tokenize

import pytest

from tests.paths import ROOT
from tests.test_architecture import module_files

try:
    import tomllib
except ImportError:  # Python < 3.11: pytest's own dependency
    import tomli as tomllib

ROOTS = ("updater", "sim", "benchmarks", "examples", "tests")


def python_files(roots=ROOTS) -> list:
    return [path for root in roots for path in sorted((ROOT / root).rglob("*.py"))]


def comments(source: str):
    """``(line, text)`` of each comment of ``source`` (not a string that looks like one)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(t.start[0], t.string) for t in tokens if t.type == tokenize.COMMENT]


def test_no_module_over_400_lines():
    """A module past 400 lines is split by job (see README, layout): the packages, the
    benchmarks, the examples and the tests."""
    files = {**module_files(), **module_files(("benchmarks", "examples", "tests"))}
    lengths = {name: len(path.read_text().splitlines()) for name, path in files.items()}
    assert not {name: n for name, n in lengths.items() if n > 400}


DATA_TABLES = ("updater/common/npz.py", "tests/updater/runtime/test_comm.py")
"""The files whose one ``# fmt: skip`` keeps a table of data in rows (a dict of file kinds; a
parametrize table)."""


def formatter_escapes(source: str) -> list:
    """``"skip:LINE"`` for each line the formatter leaves as written (a comment ending in
    ``fmt: skip``) and ``"off:LINE"`` for each region it does (``# fmt: off``, or
    ``# yapf: disable``, which ruff takes as the same, up to ``# fmt: on``)."""
    found = []
    for line, text in comments(source):
        if re.search(r"\bfmt:\s*skip\s*$", text):
            found.append(f"skip:{line}")
        elif re.match(r"#\s*(fmt:\s*off|yapf:\s*disable)\b", text):
            found.append(f"off:{line}")
    return found


def test_no_formatter_escapes():
    """The code is laid out by the formatter: no ``# fmt: off`` region, no ``# fmt: skip`` but
    one per table of data (:data:`DATA_TABLES`); the 400-line rule then counts the formatter's
    lines."""
    found = {
        str(path.relative_to(ROOT)): escapes
        for path in python_files()
        if (escapes := formatter_escapes(path.read_text()))
    }
    assert {path: [e.split(":")[0] for e in escapes] for path, escapes in found.items()} == {
        path: ["skip"] for path in DATA_TABLES
    }


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("# fmt: off\nx = [\n    1, 2,\n    3, 4,\n]\n# fmt: on\n", ["off:1"]),
        ("def f():\n    # fmt: off\n    return [1,2]\n", ["off:2"]),
        ("# yapf: disable\nx = [1,2]\n", ["off:1"]),
        ("x = [1,2]  # fmt: skip\n", ["skip:1"]),
        ("x = [1,2]  # noqa: E231 # fmt: skip\n", ["skip:1"]),
        ('x = "# fmt: off"\ny = 1  # not fmt: skip here, said\n', []),
    ],
)
def test_the_formatter_check_finds_a_planted_escape(source, found):
    """A hand-packed ``# fmt: off`` region, which the older check (lines ending in
    ``# fmt: skip``) let through, is found; a string or a comment that only names it is not."""
    assert formatter_escapes(source) == found


MAX_FUNCTION_LINES = 60


def long_functions(path) -> list:
    """The functions of ``path`` over :data:`MAX_FUNCTION_LINES` lines, their docstring not
    counted."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        lines = node.end_lineno - node.lineno + 1
        if ast.get_docstring(node, clean=False) is not None:
            lines -= node.body[0].end_lineno - node.body[0].lineno + 1
        if lines > MAX_FUNCTION_LINES:
            found.append(f"{node.name} ({lines} lines)")
    return found


@pytest.mark.parametrize("package", ["sim", "updater"])
def test_no_function_over_60_lines(package):
    """A function over 60 lines is split by job: there is no reason that keeps one whole (the
    ``Not split:`` reasons of earlier versions are gone)."""
    bad = {
        name: f for name, path in module_files((package,)).items() if (f := long_functions(path))
    }
    assert not bad


def test_the_size_check_catches_a_long_function(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))  # with def: 60
    path = tmp_path / "m.py"
    path.write_text(f'def f(a):\n    """Doc."""\n{body}')
    assert long_functions(path) == []  # at the limit
    path.write_text(
        f'def f(a):\n    """Doc.\n\n    Not split: one loop.\n    """\n{body}    x = 0\n'
    )
    assert long_functions(path) == [f"f ({MAX_FUNCTION_LINES + 1} lines)"]


COMPLEXITY = {
    "C901": ("mccabe", "max-complexity", 10),
    "PLR0912": ("pylint", "max-branches", 12),
    "PLR0913": ("pylint", "max-args", 8),
    "PLR0915": ("pylint", "max-statements", 50),
}
"""ruff's complexity rules and the project's limits: McCabe's 10 (ruff's default), pylint's
default 12 branches and 50 statements, and the project's 8 parameters (``self`` not counted)."""
PUBLIC_SIGNATURES = {
    "updater/driver/updater.py:__init__": "nnabla's updater's arguments, then the options",
    "updater/trace/recorder.py:__init__": "its options, five deprecated in their old places",
    "updater/trace/recorder.py:record": "one argument per measurement the driver hands over",
    "sim/traces/families.py:drifting_trace": "one documented setting of the family each",
    "sim/traces/families.py:spiky_trace": "one documented setting of the family each",
    "sim/traces/families.py:nan_trace": "one documented setting of the family each",
}
"""The public signatures whose ``# noqa: PLR0913`` lets them take more than 8 parameters: a
user passes each by name, and a record of them would only move the list. No other complexity
rule is suppressed anywhere."""


def complexity_suppressions(source: str, name: str) -> list:
    """``"NAME:FUNCTION"`` (or ``"NAME:LINE"`` outside a signature) for each ``noqa`` comment of
    ``source`` (the file ``name``) that suppresses a rule of :data:`COMPLEXITY` (a blanket
    ``noqa`` and a file-wide ``ruff: noqa`` included)."""
    headers = {
        line: node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for line in range(node.lineno, node.body[0].lineno)
    }
    found = []
    for line, text in comments(source):
        match = re.search(r"\bnoqa\b(:?)([\w\s,]*)", text)
        codes = set(re.findall(r"[A-Z]+\d+", match.group(2))) if match and match.group(1) else None
        if match and (codes is None or codes & set(COMPLEXITY)):
            found.append(f"{name}:{headers.get(line, line)}")
    return found


def test_ruff_applies_the_complexity_rules_at_the_projects_limits():
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert set(COMPLEXITY) <= set(lint["select"])
    for section, key, limit in COMPLEXITY.values():
        assert lint[section][key] == limit, key
    assert not set(COMPLEXITY) & set(lint.get("ignore", []))
    # the tests' models and helpers take their settings by name, as the size rule let them
    assert lint.get("per-file-ignores", {}) == {"tests/**": ["PLR0913"]}


def test_the_complexity_rules_are_suppressed_only_on_the_public_signatures():
    found = [
        s
        for path in python_files()
        for s in complexity_suppressions(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert sorted(found) == sorted(PUBLIC_SIGNATURES)


def test_the_suppression_check_finds_a_planted_noqa():
    source = (
        "def f(a, b, c, d, e, f, g, h, i):  # noqa: PLR0913\n    pass\n"
        "def g(  # noqa: C901, E501\n    a,\n):\n    pass\n"
        "def h():  # noqa\n    pass\n"
        "x = 1  # noqa: E501\n"
        "# ruff: noqa: PLR0915\n"
    )
    found = complexity_suppressions(source, "m.py")
    assert found == [f"m.py:{f}" for f in ("f", "g", "h", "10")]


def test_ruff_refuses_a_planted_function_over_each_limit(tmp_path):
    """The project's ruff configuration, on a planted file: a function of 9 parameters, one of
    13 branches in a row (complexity 14), one of 51 statements; one at the limits passes."""
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (the dev extra)")
    ifs = "".join(f"    if a == {i}:\n        return {i}\n" for i in range(13))
    lines = "".join(f"    x{i} = {i}\n" for i in range(51))  # the return not counted
    source = (
        "def many(a, b, c, d, e, f, g, h, i):\n    return a\n\n\n"
        f"def branchy(a):\n{ifs}    return a\n\n\n"
        f"def long(a):\n{lines}    return a\n\n\n"
        "def eight(a, b, c, d, e, f, g, h):\n    return a\n"
    )
    (tmp_path / "planted.py").write_text(source)
    command = [ruff, "check", "--no-cache", "--config", str(ROOT / "pyproject.toml")]
    command += ["--select", ",".join(COMPLEXITY), "--output-format", "concise", "planted.py"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    defs = {i: line[4:].split("(")[0] for i, line in enumerate(source.splitlines(), 1)}
    found = re.findall(r"^planted\.py:(\d+):\d+: (\w+) ", done.stdout, re.M)
    assert {(defs.get(int(line)), code) for line, code in found} == {
        ("many", "PLR0913"),
        ("branchy", "C901"),
        ("branchy", "PLR0912"),
        ("long", "PLR0915"),
    }, done.stdout + done.stderr
