"""Issue 50: a figure is replaced only when its bytes prove that dls wrote it in the same format:
a user's SVG or PDF mentioning the words, an edited SVG, a PDF a viewer annotated, a PNG
redrawn with PIL are the user's; real files written by matplotlib, PIL and hand."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from matplotlib.figure import Figure
from PIL import Image, ImageDraw, PngImagePlugin

from sim.plots.common import save_figure
from updater.common.writing import UnsafeOutputError

DLS = str(Path(sys.executable).parent / "dls")


def _figure(title="steps"):
    fig = Figure(figsize=(3, 2))
    ax = fig.add_subplot()
    ax.plot([1, 2, 3], [1, 4, 2])
    ax.set_title(title)
    return fig


def _refused(path, words="not written by dls"):
    before = path.read_bytes()
    with pytest.raises(UnsafeOutputError) as e:
        save_figure(_figure("new"), path)
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"{path}: ") and words in message, message
    assert message.endswith("(--force/overwrite=True replaces it)")
    assert path.read_bytes() == before


@pytest.mark.parametrize("fmt", ["png", "pdf", "svg"])
def test_a_figure_replaces_its_own_and_a_byte_copy_of_it(tmp_path, fmt):
    path = save_figure(_figure(), tmp_path / f"f.{fmt}")
    save_figure(_figure("again"), path)
    shutil.copy(path, tmp_path / f"copy.{fmt}")
    save_figure(_figure(), tmp_path / f"copy.{fmt}")
    save_figure(_figure(), path, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"copy.{fmt}", f"f.{fmt}"]


def test_a_figure_never_replaces_one_of_another_format(tmp_path):
    save_figure(_figure(), tmp_path / "f.pdf").rename(tmp_path / "f.png")
    _refused(tmp_path / "f.png", "a PDF figure written by dls, not a PNG figure")


def test_a_users_svg_whose_caption_holds_the_words_is_the_users(tmp_path):
    path = tmp_path / "mine.svg"
    path.write_text(
        '<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"><text x="0" y="9">'
        "Figure 2, written by nnabla-dls; redrawn by me</text></svg>\n"
    )
    _refused(path)
    proc = subprocess.run(
        [DLS, "simulate", "--trace", "spikes", "--steps", "20", "--runs", "1", "--plot", path],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "mine.svg: not written by dls" in proc.stderr, proc.stderr


def test_a_users_pdf_with_the_words_in_its_subject_is_the_users(tmp_path):
    path = tmp_path / "mine.pdf"
    path.write_bytes(
        b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
        b"2 0 obj << /Type /Pages /Kids [] /Count 0 >> endobj\n"
        b"3 0 obj << /Subject (written by nnabla-dls) >> endobj\n"
        b"trailer << /Root 1 0 R /Info 3 0 R >>\n%%EOF\n"
    )
    _refused(path)


def test_our_svg_after_a_text_edit_is_the_users(tmp_path):
    path = save_figure(_figure("steps"), tmp_path / "f.svg")
    text = path.read_text()
    path.write_text(text.replace("</svg>", "<!-- my note -->\n</svg>"))
    _refused(path)


def _annotate(path: Path) -> None:
    """Append an incremental update, as a PDF viewer saves an annotation: a new object, a
    cross-reference section for it and a trailer pointing to the previous one."""
    data = path.read_bytes()
    previous = int(re.findall(rb"startxref\s+(\d+)", data)[-1])
    size = int(re.findall(rb"/Size (\d+)", data)[-1])
    root = re.findall(rb"/Root (\d+ \d+ R)", data)[-1]
    annotation = (
        f"{size} 0 obj\n<< /Type /Annot /Subtype /Text /Rect [10 10 30 30] "
        "/Contents (my note) >>\nendobj\n"
    ).encode()
    start = len(data)
    xref = len(data) + len(annotation)
    update = (
        annotation
        + (
            f"xref\n{size} 1\n{start:010d} 00000 n \ntrailer\n<< /Size {size + 1} /Root "
            f"{root.decode()} /Prev {previous} >>\nstartxref\n{xref}\n%%EOF\n"
        ).encode()
    )
    path.write_bytes(data + update)


def test_our_pdf_after_a_viewer_appended_an_annotation_is_the_users(tmp_path):
    path = save_figure(_figure(), tmp_path / "f.pdf")
    _annotate(path)
    _refused(path)


def test_our_png_drawn_on_with_pil_keeping_its_text_chunks_is_the_users(tmp_path):
    path = save_figure(_figure(), tmp_path / "f.png")
    with Image.open(path) as image:
        image.load()
        chunks = dict(image.text)
        drawn = image.copy()
    assert any(value.startswith("nnabla-dls") for value in chunks.values())
    ImageDraw.Draw(drawn).rectangle([5, 5, 40, 40], outline="red")
    info = PngImagePlugin.PngInfo()
    for key, value in chunks.items():
        info.add_text(key, value)
    drawn.save(path, pnginfo=info)
    with Image.open(path) as image:
        assert dict(image.text) == chunks  # the text chunks kept, the proof among them
    _refused(path)
