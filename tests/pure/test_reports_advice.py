"""Advice per verdict: every probe has some, and it reads the cell (pooler, versions, settings, driver)."""

from __future__ import annotations

from typing import Any

import pytest

from leakcheck.model.target import Pooler, Route
from leakcheck.model.verdicts import Fact, Scope, Verdict
from leakcheck.probes import PROBES
from leakcheck.reports.advice import advice
from leakcheck.reports.rules import RULES
from tests.pure.outcomes import at, pooler

BOUNCER_118, BOUNCER_122, BOUNCER_124 = pooler("pgbouncer", "1.18.0"), pooler("pgbouncer", "1.22.1"), \
    pooler("pgbouncer", "1.24.1")


def said(probe: str, verdict: Verdict = Verdict.LEAKS, on: Pooler | None = BOUNCER_124, **kw: Any) -> str:
    text = advice(at(probe, verdict, on, **kw))
    assert text is not None
    return text


@pytest.mark.parametrize("probe", [p.id for p in PROBES])
@pytest.mark.parametrize("verdict", [Verdict.LEAKS, Verdict.LOST, Verdict.BREAKS, Verdict.NOT_APPLICABLE])
def test_every_probe_has_advice_for_every_problem_verdict(probe: str, verdict: Verdict) -> None:
    for where in (BOUNCER_118, BOUNCER_124, pooler("odyssey", "1.5.2"), pooler("pgpool", "4.3.5"),
                  pooler("dsn", config="staging")):
        text = said(probe, verdict, where)
        assert text.strip() and text.count("`") % 2 == 0  # code spans are closed


def test_every_session_probe_has_its_own_advice_and_transaction_probes_share_one() -> None:
    session = {p.id for p in PROBES if p.scope is Scope.SESSION}
    assert session <= RULES.keys()
    for p in PROBES:
        if p.scope is Scope.TRANSACTION:
            assert "never outlive its transaction" in said(p.id)


def test_nothing_to_do_for_isolated_skipped_and_controls() -> None:
    assert advice(at("timezone", Verdict.ISOLATED, BOUNCER_124)) is None
    assert advice(at("timezone", Verdict.SKIPPED, BOUNCER_124)) is None
    assert advice(at("timezone", Verdict.LEAKS, None, route=Route.SHARED)) is None  # the control is meant to leak
    assert advice(at("timezone", Verdict.LEAKS, BOUNCER_124, route=Route.SESSION)) is None


def test_an_isolated_cell_whose_driver_was_misreported_gets_advice_on_its_cache() -> None:
    text = said("search_path", Verdict.ISOLATED, facts=(Fact.MISREPORTED,))
    assert "ParameterStatus" in text


def test_an_error_is_not_advice_about_the_pooler() -> None:
    assert said("timezone", Verdict.ERROR).startswith("No verdict")


def test_settings_get_set_local_or_a_role_default_instead_of_set() -> None:
    text = said("statement_timeout")
    assert "SET LOCAL statement_timeout" in text and "ALTER ROLE" in text
    assert "server_reset_query_always" in text  # with its trade-off, on PgBouncer only
    assert "server_reset_query_always" not in said("statement_timeout", on=pooler("odyssey", "1.5.2"))
    assert "set_config('leakcheck.tenant', ..., true)" in said("custom_setting")
    assert "pg_advisory_xact_lock" in said("advisory_lock")
    assert "ON COMMIT DROP" in said("temp_table")
    assert "direct connection" in said("listen_notify") and "session" in said("listen_notify")


def test_prepares_on_a_pgbouncer_without_max_prepared_statements_say_it_needs_1_21() -> None:
    text = said("protocol_prepare", Verdict.BREAKS, BOUNCER_118)
    assert "PgBouncer 1.18.0 cannot track" in text and "needs 1.21+" in text and "upgrade" in text
    assert "prepare_threshold=None" in text and "statement_cache_size" not in text


def test_prepares_between_1_21_and_1_24_say_the_setting_defaults_to_off() -> None:
    text = said("protocol_prepare_moved", Verdict.LOST, BOUNCER_122, driver="asyncpg")
    assert "defaults to 0" in text and "statement_cache_size=0" in text and "prepare_threshold" not in text


def test_prepares_read_the_cells_own_max_prepared_statements_axis() -> None:
    cell = pooler("pgbouncer", "1.24.1", (("max_prepared_statements", "0"),))
    assert "This cell runs `max_prepared_statements=0`" in said("protocol_prepare", Verdict.BREAKS, cell)
    assert "default 200 since 1.24" in said("protocol_prepare", Verdict.BREAKS, BOUNCER_124)


def test_odyssey_gets_its_own_prepared_statement_setting() -> None:
    text = said("protocol_prepare", Verdict.BREAKS, pooler("odyssey", "1.5.2"))
    assert "pool_reserve_prepared_statement yes" in text and "max_prepared_statements" not in text
    on = pooler("odyssey", "1.5.2", (("pool_reserve_prepared_statement", "yes"),))
    assert "already sets" in said("protocol_prepare", Verdict.BREAKS, on)


def test_pgpool_advice_says_it_shares_nothing_while_both_are_connected() -> None:
    text = said("statement_timeout", on=pooler("pgpool", "4.3.5"))
    assert "shares nothing while both clients are connected" in text and "reset_query_list" in text


def test_search_path_advice_follows_the_postgresql_and_pgbouncer_versions() -> None:
    old_pg = said("search_path", pg="16.14")
    assert "PostgreSQL 16 does not report search_path" in old_pg and "Schema-qualify" in old_pg
    new_pg = said("search_path", pg="18.4")
    assert "1.26+" in new_pg and "CVE-2025-12819" in new_pg and "1.25.1" in new_pg and "auth_user" in new_pg
    assert "has neither: upgrade" in said("search_path", on=BOUNCER_118, pg="18.4")
    assert "track_extra_parameters" in said("search_path", on=pooler("pgbouncer", "1.26.1"), pg="18.4")


def test_tracked_parameters_name_the_release_that_tracks_them() -> None:
    assert "since 1.20" in said("intervalstyle", on=BOUNCER_118)
    assert "since 1.20" not in said("intervalstyle", on=BOUNCER_124)
    assert "fixed in 1.22" in said("application_name_empty", on=BOUNCER_118)
    assert "fixed in 1.22" not in said("application_name_empty", on=BOUNCER_124)


def test_statement_mode_not_applicable_says_what_statement_mode_refuses() -> None:
    cell = pooler("pgbouncer", "1.24.1", (("pool_mode", "statement"),))
    text = said("set_local", Verdict.NOT_APPLICABLE, cell)
    assert "`pool_mode=statement` refuses transaction blocks" in text
    refused = "the pooler refused a step this probe needs: transaction blocks not allowed in statement pooling mode"
    assert "refuses transaction blocks" in said("timezone", Verdict.NOT_APPLICABLE, pooler("dsn", config="x"),
                                                evidence=refused)


def test_a_running_pooler_without_the_test_fixtures_is_told_how_to_create_them() -> None:
    assert "leakcheck fixtures" in said("rls_tenant", Verdict.NOT_APPLICABLE, pooler("dsn", config="staging"))
    assert "superuser login" in said("session_authorization", Verdict.NOT_APPLICABLE, pooler("dsn", config="s"))


def test_a_probe_without_an_entry_gets_the_generic_line_for_its_verdict() -> None:
    assert "SET LOCAL" in said("a_future_probe", Verdict.LEAKS)
    assert "re-establish it" in said("a_future_probe", Verdict.LOST)
    assert "errors through PgBouncer" in said("a_future_probe", Verdict.BREAKS)


def test_advice_depends_on_the_verdict_and_the_cell_never_on_the_evidence() -> None:
    for p in PROBES:
        for v in (Verdict.LEAKS, Verdict.LOST, Verdict.BREAKS):
            assert said(p.id, v, evidence="one") == said(p.id, v, evidence="B read 'x' <script>")
