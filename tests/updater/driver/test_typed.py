"""The updater as static tools see it (issue 51): mypy on a user's script reports a wrong-typed
option and reads an option attribute with its type; the typed signature, the typed attributes and
the lazy names of ``updater`` agree with the options record, each default written once in it."""

import ast
import dataclasses
import inspect
import os
import re
import subprocess
import sys

import updater
from tests.paths import ROOT
from updater import DynamicLossScalingUpdater
from updater.driver.attributes import UpdaterAttributes
from updater.driver.options import OPTIONS

HEADER = """\
from typing import Deque, Optional

import nnabla as nn
import nnabla.solvers as S

from updater import DynamicLossScalingUpdater, StepRecord

loss = nn.Variable((1,))
solver = S.Sgd()
"""

GOOD = """\
u = DynamicLossScalingUpdater(solver, loss, None, 8.0, 2.0, 2000, True, 1, None, None, None)
u = DynamicLossScalingUpdater(
    solver, loss, on_overflow="retry", max_retries=8, clip_grad_norm=1.0, finite_check="numpy"
)
retries: int = u.max_retries
norm: Optional[float] = u.clip_grad_norm
path: str = u.finite_check
records: Deque[StepRecord] = u.history
u.max_retries = 3
u.clip_grad_norm = None
record: StepRecord = u.update()
"""

BAD = """\
DynamicLossScalingUpdater(solver, loss, max_retries="eight")  # E: arg-type
DynamicLossScalingUpdater(solver, loss, None, 8.0, 2.0, 2000, "yes")  # E: arg-type
DynamicLossScalingUpdater(solver, loss, max_retrys=8)  # E: call-arg
u = DynamicLossScalingUpdater(solver, loss)
retries: str = u.max_retries  # E: assignment
u.clip_grad_norm = "1.0"  # E: assignment
record: int = u.update()  # E: assignment
u.history.append(3)  # E: arg-type
"""

MYPY_CONFIG = """\
[mypy]
follow_imports = silent

[mypy-nnabla.*]
ignore_missing_imports = True
"""


def mypy_errors(tmp_path, scripts) -> set:
    """``(script, line, error code)`` of each error mypy reports on ``scripts`` (name -> body
    after :data:`HEADER`), with this checkout's ``updater``; nnabla ships no types."""
    (tmp_path / "mypy.ini").write_text(MYPY_CONFIG)
    for name, body in scripts.items():
        (tmp_path / name).write_text(HEADER + body)
    command = [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir", "cache"]
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    done = subprocess.run(
        [*command, *scripts], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 1: errors found
    found = re.findall(r"^(\w+\.py):(\d+): error: .*\[([\w-]+)\]$", done.stdout, re.M)
    return {(name, int(line), code) for name, line, code in found}


def expected_errors(name: str, body: str) -> set:
    """The ``# E: code`` comments of a script: ``(script, line, code)``."""
    offset = HEADER.count("\n")
    return {
        (name, offset + i, match.group(1))
        for i, line in enumerate(body.splitlines(), 1)
        if (match := re.search(r"# E: ([\w-]+)", line))
    }


def test_mypy_reports_wrong_typed_options_and_types_the_attributes(tmp_path):
    """A wrong-typed option (by keyword or in nnabla's positional order), a misspelt one, and a
    read or assignment of an option attribute against its type are errors; reading the options,
    the path, the history and the record with their types is not (the class is not ``Any``)."""
    errors = mypy_errors(tmp_path, {"good.py": GOOD, "bad.py": BAD})
    assert errors == expected_errors("bad.py", BAD)


def normal(annotation: str) -> str:
    return ast.unparse(ast.parse(annotation, mode="eval"))


def test_the_typed_signature_is_the_records_names_order_types_and_defaults():
    parameters = inspect.signature(DynamicLossScalingUpdater).parameters
    assert [name for name in parameters if name in OPTIONS] == list(OPTIONS)
    for name, f in OPTIONS.items():
        p = parameters[name]
        assert normal(p.annotation) == normal(f.type), name
        missing = f.default is dataclasses.MISSING
        assert p.default is p.empty if missing else p.default == f.default, name


def test_each_default_is_written_once_in_the_record():
    """The signature's source writes ``DEFAULT`` for every option with a default."""
    tree = ast.parse((ROOT / "updater" / "driver" / "updater.py").read_text())
    init = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "__init__"
    )
    args = init.args
    positional = args.args[len(args.args) - len(args.defaults) :]
    defaults = {a.arg: d for a, d in zip(positional, args.defaults)}
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults)})
    for name, f in OPTIONS.items():
        if f.default is not dataclasses.MISSING:
            assert ast.unparse(defaults[name]) == "DEFAULT", name


def own_property(name: str) -> bool:
    """Whether the updater defines the attribute ``name`` itself (not from the record)."""
    value = vars(DynamicLossScalingUpdater).get(name)
    fget = getattr(value, "fget", None)
    return getattr(fget, "__qualname__", "").startswith("DynamicLossScalingUpdater.")


def test_the_option_attributes_have_the_records_types():
    declared = UpdaterAttributes.__annotations__
    assert set(declared) <= set(OPTIONS)
    for name, f in OPTIONS.items():
        assert (name in declared) != own_property(name), name
        if name in declared:
            assert normal(declared[name]) == normal(f.type), name
    assert own_property("history") and own_property("finite_check")


def test_static_tools_see_every_lazy_name_of_the_package():
    """``updater/__init__.py`` imports each name of ``_LAZY`` from its module for static tools
    (the module's ``__getattr__`` alone would make them ``Any``)."""
    source = (ROOT / "updater" / "__init__.py").read_text()
    block = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    seen = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, ast.unparse(node)
        for alias in node.names:
            assert alias.asname == alias.name  # re-exported (mypy --no-implicit-reexport)
            seen[alias.name] = f"updater.{node.module}"
    assert seen == updater._LAZY
