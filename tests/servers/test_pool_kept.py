"""A client waiting for a server connection the pooler keeps for another, idle client is a stall known as soon as
PgBouncer's console says so twice (probes/protocol.py `_kept`), not at the step's bound; where a timer of
PgBouncer's own could end that hold within the bound, the bound still decides (the same verdict)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from leakcheck.model.target import Driver, Route, Target
from leakcheck.model.verdicts import Fact, Observation, Verdict
from leakcheck.probes import PROBES
from leakcheck.probes.base import probe
from leakcheck.probes.scenario import Scenario
from leakcheck.probes.witness import Witness
from leakcheck.provision.pgbouncer import admin, team_ini
from leakcheck.provision.postgres.fixtures import APP_ROLE
from leakcheck.run.runner import run_probe
from tests.support.servers import Measure, enterable_folder

pytestmark = pytest.mark.servers

COPY = next(p for p in PROBES if p.id == "copy_error_autocommit")


def test_a_client_waiting_for_a_server_pgbouncer_keeps_for_an_idle_client_is_stalled_on_its_console_word(
        measure: Measure) -> None:
    got = measure(COPY, "16", "1.24", Driver.PSYCOPG)  # PgBouncer 1.24 keeps A's server after its failed COPY
    assert got.verdict is Verdict.BREAKS and Fact.STALLED in got.facts, got.evidence
    assert "SHOW SERVERS showed" in got.evidence, got.evidence  # known on the console's word, not at the bound


def test_a_pool_whose_own_timer_may_end_the_hold_within_the_bound_is_not_stalled_on_its_console_word(
        measure: Measure) -> None:
    pooler = replace(measure.bouncer("1.24"), settings=(("query_timeout", "3"),))  # ends A's hold after 3 s
    got = run_probe(measure.backend, COPY, Target(measure.pg("16"), pooler, Route.TRANSACTION, Driver.PSYCOPG))
    assert Fact.STALLED not in got.facts, got.evidence


def test_pgbouncer_s_settings_and_postgresql_s_idle_timers_are_read_once_per_probe_not_at_every_look(
        measure: Measure, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = {"settings": 0, "timers": 0}
    hold_settings, idle_timers = admin.hold_settings, Witness.idle_timers

    def settings(conn: Any) -> admin.HoldSettings:
        reads["settings"] += 1
        return hold_settings(conn)

    def timers(witness: Witness) -> list[str]:
        reads["timers"] += 1
        return idle_timers(witness)

    monkeypatch.setattr(admin, "hold_settings", settings)
    monkeypatch.setattr(Witness, "idle_timers", timers)
    # looked at every 0.2 s from A's COPY on (its 1 s pause included), then known stalled
    got = measure(COPY, "16", "1.24", Driver.PSYCOPG)
    assert got.verdict is Verdict.BREAKS and Fact.STALLED in got.facts, got.evidence
    assert "in a full pool of 1" in got.evidence, got.evidence
    assert reads == {"settings": 1, "timers": 1}


@probe("oracle_held_timers", "A waits while B's open transaction holds the pool of one")
async def _held(s: Scenario) -> Observation:
    await s.observe(s.a, "connected", "1")
    await s.begin(s.b, "B's transaction")
    await s.run(s.b, "inside it", "SELECT 1")
    await s.observe(s.a, "its next statement", "1")
    return Observation(evidence="A ran after B's transaction")


def test_a_team_ini_whose_users_timer_ends_the_held_transaction_gets_the_bound_s_verdict_not_an_early_stall(
        measure: Measure) -> None:
    # PgBouncer 1.24's per-user idle_transaction_timeout ([users]), which neither SHOW CONFIG nor SHOW USERS shows,
    # ends B's idle transaction after 2 s: A is then served, within the bound (10 s as shipped), and nothing stalled
    with enterable_folder() as folder:
        ini = folder / "pgbouncer.ini"
        ini.write_text(f"[pgbouncer]\npool_mode = transaction\n\n[users]\n{APP_ROLE} = idle_transaction_timeout=2\n")
        ini.chmod(0o644)
        team_ini.load.cache_clear()
        pooler = replace(measure.bouncer("1.24"), config=str(ini))
        got = run_probe(measure.backend, _held, Target(measure.pg("16"), pooler, Route.TRANSACTION, Driver.PSYCOPG))
    assert got.verdict is not Verdict.ERROR and Fact.STALLED not in got.facts, got.evidence


def test_a_pgbouncer_that_hands_clients_timeouts_to_its_servers_is_stalled_at_the_bound_not_on_its_console_word(
        measure: Measure, monkeypatch: pytest.MonkeyPatch) -> None:
    # track_extra_parameters naming a session timer: a client's own value of it (its startup packet's) would be set
    # on the server connection B holds; the console cannot say whether one was, so the bound decides
    monkeypatch.setattr("leakcheck.probes.scenario.STEP_BOUND", 1.0)
    forwards = ("track_extra_parameters", "IntervalStyle,idle_in_transaction_session_timeout")
    pooler = replace(measure.bouncer("1.24"), settings=(forwards,))
    got = run_probe(measure.backend, _held, Target(measure.pg("16"), pooler, Route.TRANSACTION, Driver.PSYCOPG))
    assert got.verdict is Verdict.BREAKS and Fact.STALLED in got.facts, got.evidence
    assert "waited 1 s for a server connection" in got.evidence and "SHOW SERVERS" not in got.evidence, got.evidence
