"""Reports people read, each a pure function of one set of outcomes (no I/O):

- `terminal`: the matrix as text, optionally in colour, with a legend;
- `markdown`: a pull-request comment, within a size limit;
- `html`: one self-contained page (inline CSS and JS) with filters and the evidence per cell;
- `advice`: one line per problem cell on what to do, fitted to the cell;
- the JSON report is `leakcheck.results.results.dumps` (each outcome with its advice);
- `output`: the options that write them at the end of a run (`--report-html`, `--report-md`).
"""
