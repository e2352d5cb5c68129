"""The terminal matrix in colour (alignment unchanged), its legend, and when to colour."""

from __future__ import annotations

import io
import re

from leakcheck.model.target import Route
from leakcheck.model.verdicts import Fact, Outcome, Verdict
from leakcheck.reports.terminal import render_legend, render_matrix, use_color
from tests.pure.outcomes import make

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def cells() -> list[Outcome]:
    return [
        make("statement_timeout", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.LEAKS, "e",
             facts=(Fact.LEAKED,)),
        make("statement_timeout", "16.14", "1.24.1", Route.TRANSACTION, "asyncpg", Verdict.ISOLATED, "e"),
        make("protocol_prepare", "16.14", "1.18.0", Route.TRANSACTION, "psycopg", Verdict.BREAKS, "e",
             facts=(Fact.BROKE, Fact.LEAKED)),
        make("rls_tenant", "16.14", "1.18.0", Route.TRANSACTION, "psycopg", Verdict.ERROR, "e", security=True),
        make("timezone", "16.14", "", Route.DIRECT, "psycopg", Verdict.ISOLATED, "e"),
    ]


def test_without_colour_the_matrix_has_no_escape_codes() -> None:
    assert "\x1b" not in render_matrix(cells()) and "\x1b" not in render_matrix(cells(), legend=True)


def test_colour_paints_verdicts_and_leaves_the_plain_text_and_alignment_as_they_were() -> None:
    coloured = render_matrix(cells(), color=True)
    assert "\x1b[1;31mLEAKS\x1b[0m" in coloured and "\x1b[32misolated\x1b[0m" in coloured
    assert "\x1b[1;35mBREAKS+leaked\x1b[0m" in coloured and "\x1b[1;97;41merror\x1b[0m" in coloured
    assert ANSI.sub("", coloured) == render_matrix(cells())


def test_the_legend_explains_the_words_in_the_matrix_the_fact_suffix_and_security() -> None:
    legend = render_legend(cells())
    assert "LEAKS: the other client saw the state" in legend and "BREAKS: using the feature raised errors" in legend
    assert "error: the harness could not measure" in legend
    assert "LOST" not in legend  # no cell says it
    assert "+fact:" in legend and "BREAKS+leaked" in legend and "[security]" in legend
    assert render_matrix(cells(), legend=True).endswith(legend)


def test_without_other_facts_or_security_the_legend_leaves_them_out() -> None:
    legend = render_legend([make("timezone", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.ISOLATED, "e")])
    assert "+fact" not in legend and "[security]" not in legend


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_follows_py_colors_no_color_force_color_then_the_terminal() -> None:
    assert use_color(Tty(), {}) is True
    assert use_color(Tty(), {"TERM": "dumb"}) is False
    assert use_color(io.StringIO(), {}) is False
    assert use_color(Tty(), {"NO_COLOR": "1"}) is False
    assert use_color(Tty(), {"NO_COLOR": ""}) is True  # NO_COLOR counts only when not empty
    assert use_color(io.StringIO(), {"FORCE_COLOR": "1"}) is True
    assert use_color(Tty(), {"NO_COLOR": "1", "FORCE_COLOR": "1"}) is False
    assert use_color(io.StringIO(), {"PY_COLORS": "1", "NO_COLOR": "1"}) is True
    assert use_color(Tty(), {"PY_COLORS": "0"}) is False
