"""Reports people read, each a pure function of one set of outcomes (no I/O):

- `terminal`: the matrix as text, optionally in colour, with a legend;
- `markdown`: a pull-request comment, within a size limit;
- `html`: one self-contained page (inline CSS and JS) with filters and the evidence per cell;
- `advice`: one line per problem cell on what to do, fitted to the cell;
- the JSON report is `leakcheck.results.dumps` (each outcome with its advice);
- `output`: the options that write them at the end of a run (`--report-html`, `--report-md`).
"""

from __future__ import annotations

from .advice import advice
from .html import render_html
from .markdown import render_markdown
from .terminal import cell, render_counts, render_legend, render_matrix, use_color, word

__all__ = ["advice", "cell", "render_counts", "render_html", "render_legend", "render_markdown", "render_matrix",
           "use_color", "word"]
