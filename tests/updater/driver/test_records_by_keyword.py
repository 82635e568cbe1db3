"""The driver builds its records by keyword (issue 51): a record (a ``NamedTuple`` or a dataclass
of ``updater/driver``) is never made from positional arguments, whose order a new field would
silently shift. The tables of nnabla's functions (``Writes``, ``Indexes`` in
``function_roles.py``) are data, one row a line, and keep their columns."""

import ast

from tests.paths import ROOT

DRIVER = ROOT / "updater" / "driver"
TABLE_ROWS = {"Writes", "Indexes"}


def record_classes(trees) -> set:
    """Names of the NamedTuples and dataclasses defined in ``trees``."""
    found = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b) for b in node.bases}
                decorators = {ast.unparse(d).split("(")[0] for d in node.decorator_list}
                if "NamedTuple" in bases or "dataclass" in decorators:
                    found.add(node.name)
    return found


def positional_records(tree, records) -> list:
    """``line: call`` of each call in ``tree`` that makes one of ``records`` from positional
    arguments."""
    return [
        f"{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and ast.unparse(node.func).rpartition(".")[2] in records
        and node.args
    ]


def test_every_record_of_the_driver_is_built_by_keyword():
    trees = {path: ast.parse(path.read_text()) for path in DRIVER.rglob("*.py")}
    records = record_classes(trees.values())
    assert {"Pending", "Judged", "Findings", "StepRecord"} <= records
    bad = {
        str(path.relative_to(ROOT)): calls
        for path, tree in trees.items()
        if (calls := positional_records(tree, records - TABLE_ROWS))
    }
    assert not bad


def test_a_positional_record_is_found_and_a_keyword_one_is_not():
    tree = ast.parse("a = Pending(1.0, True)\nb = Pending(seed=1.0, finite=True)\nc = f(1)\n")
    assert positional_records(tree, {"Pending"}) == ["1: Pending(1.0, True)"]
