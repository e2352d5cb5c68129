"""Outcomes as data: gathered from test reports, put in one order, the `--results` file."""
