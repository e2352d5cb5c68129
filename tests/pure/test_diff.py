"""The upgrade diff (pure): cells as written, only what changes, drivers that agree shown once."""

import pytest

from leakcheck.config.diff_sides import parse_side
from leakcheck.model.errors import UsageError
from leakcheck.model.target import PoolerKind, Route
from leakcheck.model.verdicts import Fact, Outcome, Verdict
from leakcheck.reports.diff import compare, render_markdown, render_text
from tests.pure.outcomes import make


def side(bouncer: str, probe: str, verdict: Verdict, driver: str = "psycopg", pg: str = "16.14",
         settings: tuple[tuple[str, str], ...] = (), facts: tuple[Fact, ...] = ()) -> Outcome:
    return make(probe, pg, bouncer, Route.TRANSACTION, driver, verdict, f"{probe} on {bouncer}",
                driver_version="3.3.9", settings=settings, facts=facts)


def test_a_cell_is_written_as_in_keys_and_ids() -> None:
    cell = parse_side("pg18/pgbouncer1.24[max_prepared_statements=0]")
    assert (str(cell.pg), cell.kind, str(cell.version), cell.settings) == (
        "18", PoolerKind.PGBOUNCER, "1.24", (("max_prepared_statements", "0"),))
    assert parse_side("pg16.14/odyssey1.5").kind is PoolerKind.ODYSSEY


@pytest.mark.parametrize("text", ["16/1.24", "pg16/pgcat1.0", "pg16/pgbouncer", "pg16/pgbouncer1.24[x]"])
def test_a_malformed_cell_is_one_line(text: str) -> None:
    with pytest.raises(UsageError, match="a cell such as pg16/pgbouncer1.24"):
        parse_side(text)


def test_only_what_changes_is_shown_with_both_sides_evidence() -> None:
    outcomes = [side("1.24.1", "search_path", Verdict.LEAKS),
                side("1.26.1", "search_path", Verdict.ISOLATED, pg="18.4"),
                side("1.24.1", "timezone", Verdict.ISOLATED), side("1.26.1", "timezone", Verdict.ISOLATED, pg="18.4")]
    before, after = parse_side("pg16/pgbouncer1.24"), parse_side("pg18/pgbouncer1.26")
    changes, same = compare(outcomes, before, after)
    assert [(c.probe, same) for c in changes] == [("search_path", 1)]
    text = render_text(changes, same, before, after)
    assert "search_path (psycopg): leaks -> isolated" in text
    assert "before (pg16.14/pgbouncer1.24.1/psycopg3.3.9): search_path on 1.24.1" in text
    assert "timezone" not in text


def test_a_fact_that_changes_is_a_change_and_drivers_that_agree_are_one_block() -> None:
    outcomes = [side("1.18.0", "intervalstyle", Verdict.LEAKS, d, facts=(Fact.LEAKED, Fact.MISREPORTED))
                for d in ("psycopg", "asyncpg")]
    outcomes += [side("1.24.1", "intervalstyle", Verdict.LEAKS, d, facts=(Fact.LEAKED,))
                 for d in ("psycopg", "asyncpg")]
    changes, _ = compare(outcomes, parse_side("pg16/pgbouncer1.18"), parse_side("pg16/pgbouncer1.24"))
    text = render_text(changes, 0, parse_side("pg16/pgbouncer1.18"), parse_side("pg16/pgbouncer1.24"))
    assert "intervalstyle (both drivers): leaks+misreported -> leaks" in text


def test_settings_must_match_for_an_outcome_to_belong_to_a_cell() -> None:
    outcomes = [side("1.24.1", "protocol_prepare", Verdict.BREAKS, settings=(("max_prepared_statements", "0"),)),
                side("1.24.1", "protocol_prepare", Verdict.ISOLATED, settings=(("max_prepared_statements", "200"),))]
    before = parse_side("pg16/pgbouncer1.24[max_prepared_statements=0]")
    after = parse_side("pg16/pgbouncer1.24[max_prepared_statements=200]")
    changes, _ = compare(outcomes, before, after)
    assert [(c.before and c.before.verdict, c.after and c.after.verdict) for c in changes] == [
        (Verdict.BREAKS, Verdict.ISOLATED)]
    md = render_markdown(changes, 0, before, after)
    assert "| protocol\\_prepare | psycopg | breaks | isolated |" in md and "<details>" in md


def test_the_markdown_diff_makes_evidence_inert() -> None:
    hostile = "</details><script>alert(1)</script> | *bold* `code`"
    outcomes = [make("search_path", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.ISOLATED, "fine",
                     driver_version="3.3.9"),
                make("search_path", "16.14", "1.26.1", Route.TRANSACTION, "psycopg", Verdict.LEAKS, hostile,
                     driver_version="3.3.9")]
    before, after = parse_side("pg16/pgbouncer1.24"), parse_side("pg16/pgbouncer1.26")
    changes, _ = compare(outcomes, before, after)
    md = render_markdown(changes, 0, before, after)
    assert "<script>" not in md and "</details><" not in md.replace("</details>\n", "")
    assert r"\<script\>" in md and r"\| \*bold\* \`code\`" in md


def test_a_diff_side_the_matrix_does_not_run_is_refused_before_any_server_starts() -> None:
    from leakcheck.config.config import Config

    diff = "pg16/pgbouncer1.24..pg18/pgbouncer1.26"
    with pytest.raises(UsageError, match="pg18/pgbouncer1.26 is not in the matrix"):
        Config.from_strings({"leakcheck_pg": "16", "leakcheck_bouncer": "1.24", "leakcheck_diff": diff})
    assert Config.from_strings({"leakcheck_pg": "16.14,18", "leakcheck_bouncer": "1.24.1,1.26",
                                "leakcheck_diff": diff}).diff is not None
    assert Config.from_strings({"leakcheck_diff": diff}).diff is not None  # alone: it runs its two cells


def test_a_runs_diff_names_the_side_it_did_not_measure() -> None:
    from leakcheck.reports.diff import run_diff_lines

    outcomes = [side("1.24.1", "search_path", Verdict.LEAKS)]
    lines = run_diff_lines(outcomes, parse_side("pg16/pgbouncer1.24"), parse_side("pg16/pgbouncer1.26"))
    assert lines[-1] == "leakcheck: the run measured nothing of pg16/pgbouncer1.26: add it to the matrix"
