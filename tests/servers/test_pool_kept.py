"""A client waiting for a server connection the pooler keeps for another, idle client is a stall known as soon as
PgBouncer's console says so twice (probes/protocol.py `_kept`), not at the step's bound; where a timer of
PgBouncer's own could end that hold within the bound, the bound still decides (the same verdict)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from leakcheck.model.target import Driver, Route, Target
from leakcheck.model.verdicts import Fact, Verdict
from leakcheck.probes import PROBES
from leakcheck.probes.witness import Witness
from leakcheck.provision.pgbouncer import admin
from leakcheck.run.runner import run_probe
from tests.support.servers import Measure

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
