"""What the figure tests check on a drawn figure: a real PNG of the expected size, legend texts,
an artist's extent once drawn."""

import matplotlib.image as mpimg
import numpy as np


def check_png(path, width, height):
    """``path`` is a PNG of ``width`` x ``height`` pixels, not blank (many distinct colours)."""
    assert path.exists() and path.stat().st_size > 5000
    image = mpimg.imread(path)
    assert image.shape[:2] == (height, width)
    assert len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 20


def legend_labels(legend):
    """The texts of ``legend``."""
    return [t.get_text() for t in legend.get_texts()]


def extent(fig, artist):
    """The window extent of ``artist`` once ``fig`` is drawn (through Agg)."""
    fig.canvas.draw()
    return artist.get_window_extent()
