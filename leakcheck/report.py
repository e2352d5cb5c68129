"""The terminal reporter's public names (kept here for the plugin, `leakcheck merge` and older imports);
the reporters live in `leakcheck.reports`."""

from __future__ import annotations

from .reports.grid import canonical_order
from .reports.terminal import LONG_COLUMN, cell, render_counts, render_legend, render_matrix, use_color, word

__all__ = ["LONG_COLUMN", "canonical_order", "cell", "render_counts", "render_legend", "render_matrix", "use_color",
           "word"]
