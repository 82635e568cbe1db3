"""The documentation site builds offline with warnings as errors (``mkdocs build --strict``),
quietly, and the built HTML works from disk: every link opens a file of the site, every page is
reachable from the home page, and the API reference shows no raw Sphinx role. The site is built
once for the module."""

import inspect
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.docs.pages import DOCS, PAGES, page_id
from tests.paths import ROOT

MKDOCS = Path(sys.executable).parent / "mkdocs"
ROLE = re.compile(r":(?:py:)?(?:meth|class|func|data|attr|mod|exc|obj|const):\s*(?:<code>|`)")
"""A Sphinx role as the HTML would show it, raw (before its name, in backticks or code)."""
LINK = re.compile(r'(?:href|src)="([^"]*)"')
SERVED_ONLY = {"404.html"}  # a server's page for any missing path: its links are site-absolute


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """``(the build's process, the site folder)``."""
    if sys.version_info < (3, 10):
        pytest.skip("the docs extra (mkdocstrings-python 2) needs Python 3.10")
    out = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run(
        [MKDOCS, "build", "--strict", "--site-dir", out],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc, out


def html_pages(site_dir: Path):
    return sorted(p for p in site_dir.rglob("*.html") if p.name not in SERVED_ONLY)


def local_links(page: Path):
    """``(link, target path, fragment)`` of every relative link and source of ``page``."""
    for link in LINK.findall(page.read_text()):
        parts = urlsplit(link)
        if parts.scheme or parts.netloc or link.startswith("mailto:"):
            continue
        target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        yield link, target, unquote(parts.fragment)


@pytest.mark.slow
def test_the_site_builds_with_no_warning_and_no_banner(site):
    proc, out = site
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "WARNING" not in proc.stderr
    html = (out / "reference" / "updater.html").read_text()
    assert "DynamicLossScalingUpdater" in html and "save_checkpoint" in html
    assert (out / "reports" / "policy_comparison.png").exists()
    from importlib.metadata import version

    assert "MkDocs 2.0" not in proc.stderr + proc.stdout, (
        f"mkdocs-material {version('mkdocs-material')} prints its banner: install the docs "
        "extra's pinned version (pip install -e .[docs])"
    )


@pytest.mark.slow
def test_every_link_opens_a_file_of_the_site_from_disk(site):
    """Issue 52: folder URLs (``guide/updater/``) showed folder listings from disk, and a link to
    ``examples/gan_digits.py`` (left out of the site) passed ``--strict``."""
    _, out = site
    broken, ids = [], {}
    for page in html_pages(out):
        for link, target, fragment in local_links(page):
            if not target.is_file():
                broken.append((page.relative_to(out).as_posix(), link))
            elif fragment and target.suffix == ".html":
                if target not in ids:
                    ids[target] = set(re.findall(r'\bid="([^"]+)"', target.read_text()))
                if fragment not in ids[target]:
                    broken.append((page.relative_to(out).as_posix(), link))
    assert broken == []


@pytest.mark.slow
def test_every_page_is_reachable_from_the_home_page(site):
    """Issue 52: reports/checkpoint.md was linked from no page."""
    _, out = site
    seen, todo = set(), [out / "index.html"]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".html" or not page.is_file():
            continue
        seen.add(page)
        todo.extend(target for _, target, _ in local_links(page))
    assert [p.relative_to(out).as_posix() for p in html_pages(out) if p not in seen] == []


@pytest.mark.slow
def test_the_api_reference_shows_links_not_sphinx_roles_and_signatures_as_help_does(site):
    """Issue 52: about 75 raw roles (``:meth:``, ``:class:``, ...) and ``update(new_scale=None)``
    where ``help()`` shows ``update()``."""
    from updater import DynamicLossScalingUpdater

    _, out = site
    raw = {p.relative_to(out).as_posix(): len(ROLE.findall(p.read_text())) for p in html_pages(out)}
    assert {k: v for k, v in raw.items() if v} == {}
    html = (out / "reference" / "updater.html").read_text()
    heading = html[html.index('id="updater.driver.updater.DynamicLossScalingUpdater.update"') :]
    shown = re.sub(r"<[^>]+>|&para;|\s", "", heading[heading.index(">") + 1 : heading.index("</h")])
    assert list(inspect.signature(DynamicLossScalingUpdater.update).parameters) == ["self"]
    assert shown == "update()"
    assert 'href="#updater.runtime.checkpoint.load_checkpoint"' in html  # a role made a link


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = [page_id(p)[len("docs/") :] for p in PAGES if p.parent != ROOT]
    assert [p for p in pages if f": {p}" not in nav] == []
    assert DOCS.is_dir()
