"""MkDocs hook: the repository's generated reports (markdown and figures), the shipped traces'
README, the examples and the license join the site, so the pages link to them as files."""

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
EXTRA = ["reports/*.md", "reports/*.png", "sim/traces/data/README.md", "examples/*.py", "LICENSE"]


def on_files(files, config):
    for pattern in EXTRA:
        for path in sorted(ROOT.glob(pattern)):
            uri = path.relative_to(ROOT).as_posix()
            files.append(File(uri, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files
