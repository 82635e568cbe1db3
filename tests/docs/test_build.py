"""The documentation site builds offline with warnings as errors (``mkdocs build --strict``)."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.pages import DOCS, PAGES, page_id
from tests.paths import ROOT

MKDOCS = Path(sys.executable).parent / "mkdocs"


@pytest.mark.slow
def test_the_site_builds_with_no_warning(tmp_path):
    if sys.version_info < (3, 10):
        pytest.skip("the docs extra (mkdocstrings-python 2) needs Python 3.10")
    proc = subprocess.run(
        [MKDOCS, "build", "--strict", "--site-dir", tmp_path / "site"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "WARNING" not in proc.stderr
    html = (tmp_path / "site" / "reference" / "updater" / "index.html").read_text()
    assert "DynamicLossScalingUpdater" in html and "save_checkpoint" in html
    assert (tmp_path / "site" / "reports" / "policy_comparison.png").exists()


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = [page_id(p)[len("docs/") :] for p in PAGES if p.parent != ROOT]
    assert [p for p in pages if f": {p}" not in nav] == []
    assert DOCS.is_dir()
