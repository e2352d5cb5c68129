"""The terminal matrix fits 120 columns: numbered columns with a key, then tables cut by columns."""

from __future__ import annotations

import re

from leakcheck.model.target import Route
from leakcheck.model.verdicts import Fact, Outcome, Verdict
from leakcheck.probes import PROBES
from leakcheck.reports.terminal import WIDTH, render_matrix
from tests.pure.outcomes import make

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def default_matrix(bouncers: tuple[str, ...] = ("1.18.0", "1.24.1", "1.26.1")) -> list[Outcome]:
    """The README's default matrix: every probe, three PostgreSQL, the PgBouncers, both drivers."""
    return [make(p.id, pg, b, Route.TRANSACTION, d, Verdict.BREAKS, "e", driver_version=v,
                 facts=(Fact.BROKE, Fact.LEAKED), security=p.security)
            for p in PROBES for pg in ("16.14", "17.10", "18.4") for b in bouncers
            for d, v in (("psycopg", "3.2.9"), ("asyncpg", "0.30.0"))]


def widest(text: str) -> int:
    return max(len(ANSI.sub("", line)) for line in text.splitlines())


def test_the_default_matrix_with_its_legend_fits_120_columns() -> None:
    assert widest(render_matrix(default_matrix(), legend=True)) <= WIDTH
    assert widest(render_matrix(default_matrix(), legend=True, color=True)) <= WIDTH


def test_a_table_too_wide_for_the_terminal_numbers_its_columns_with_a_key() -> None:
    text = render_matrix(default_matrix())
    assert "(1)" in text.splitlines()[1]
    assert "  (1) pgbouncer1.18.0/asyncpg0.30.0" in text.splitlines()
    assert "  (6) pgbouncer1.26.1/psycopg3.2.9" in text.splitlines()


def test_a_narrow_matrix_keeps_its_column_names() -> None:
    text = render_matrix([make("timezone", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.ISOLATED, "e")])
    assert "pgbouncer1.24.1/psycopg" in text.splitlines()[1] and "(1)" not in text


def test_more_columns_than_fit_are_cut_into_tables_that_each_repeat_the_probes() -> None:
    many = tuple(f"1.{minor}.0" for minor in range(18, 27))
    text = render_matrix(default_matrix(many))
    assert widest(text) <= WIDTH
    headers = [line for line in text.splitlines() if line.startswith("PostgreSQL 16.14")]
    assert len(headers) >= 2
    assert "(18)" in text and sum(line.startswith("timezone ") for line in text.splitlines()) >= 6
