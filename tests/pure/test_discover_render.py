"""The SQL each op sends, and the snapshot's (no servers)."""

from __future__ import annotations

import pytest

from leakcheck.discover.ops import PREPARED, UNIVERSE, Kind, Op, Who
from leakcheck.discover.render import (
    CLIENT_KEYS,
    DISPLAY,
    Names,
    Statement,
    Via,
    column_sql,
    snapshot_columns,
    snapshot_sql,
    statements,
)

A, B = Who.A, Who.B
RUN = Names("0badcafe", 123456)


@pytest.mark.parametrize(("op", "sql"), [
    (Op(A, Kind.SET, "statement_timeout"), "SET statement_timeout = '111s'"),
    (Op(B, Kind.SET, "search_path"), "SET search_path = lc_b, public"),
    (Op(B, Kind.SET, "application_name", "alt"), "SET application_name = ''"),
    (Op(A, Kind.SET_LOCAL, "work_mem"), "SET LOCAL work_mem = '1111kB'"),
    (Op(A, Kind.SET_CONFIG, "app.tenant", "local"), "SELECT set_config('app.tenant', 'tenant_a', true)"),
    (Op(A, Kind.CREATE_TEMP, "t1", "on commit drop"),
     "CREATE TEMP TABLE lc0badcafe_t1 ON COMMIT DROP AS SELECT 'lc0badcafe_A_t1'::text AS who"),
    (Op(B, Kind.PREPARE, "s2"), "PREPARE lc0badcafe_s2 AS SELECT 'lc0badcafe_B_s2'::text"),
    (Op(A, Kind.DECLARE, "c1", "hold"),
     "DECLARE lc0badcafe_c1 CURSOR WITH HOLD FOR SELECT 'lc0badcafe_A_c1' || ':' || g FROM generate_series(1, 3) AS g"),
    (Op(A, Kind.LOCK, "2"), "SELECT pg_try_advisory_lock(123456, 2)"),
    (Op(B, Kind.NOTIFY, "ch1"), "NOTIFY lc0badcafe_ch1, 'lc0badcafe_B_ch1'"),
    (Op(B, Kind.UNLISTEN, "*"), "UNLISTEN *"),
    (Op(A, Kind.DISCARD, "ALL"), "DISCARD ALL"),
])
def test_an_op_sends_its_sql_with_the_runs_names_and_its_clients_value(op: Op, sql: str) -> None:
    assert statements(op, RUN) == (Statement(sql),)


def test_a_bound_set_config_passes_the_value_as_a_parameter() -> None:
    got = statements(Op(B, Kind.SET_CONFIG, "app.tenant", "session bound"), DISPLAY)
    assert got == (Statement("SELECT set_config('app.tenant', $1, false)", Via.BOUND, ("tenant_b",)),)


def test_a_protocol_op_goes_the_drivers_prepared_way() -> None:
    assert statements(Op(A, Kind.PROTOCOL, "p1"), DISPLAY) == (Statement("SELECT 'lc_A_p1'::text AS v", Via.PROTOCOL),)


def test_nextval_creates_the_clients_own_temp_sequence_first() -> None:
    got = [s.sql for s in statements(Op(B, Kind.NEXTVAL), DISPLAY)]
    assert got == ["CREATE TEMP SEQUENCE IF NOT EXISTS lc_seq_b START 200", "SELECT nextval('lc_seq_b')"]


def test_every_op_but_observe_renders() -> None:
    for op in UNIVERSE:
        if op.kind is not Kind.OBSERVE:
            assert statements(op, RUN)


def test_the_snapshot_reads_every_column_then_the_proof_in_one_statement() -> None:
    sql = snapshot_sql(RUN, "PROOF")
    assert sql.startswith("SELECT current_setting('statement_timeout', true), ") and sql.endswith(", PROOF")
    assert all(expr in sql for _, expr in snapshot_columns(RUN))
    assert "classid = 123456" in sql and "'lc0badcafe_'" in sql


def test_a_column_reads_alone_as_a_person_would_type_it() -> None:
    assert column_sql("setting:work_mem", DISPLAY) == "SELECT current_setting('work_mem', true)"
    assert column_sql("current_user", DISPLAY) == "SELECT current_user::text"
    assert all(column_sql(key, DISPLAY) is None for key in CLIENT_KEYS)


def test_a_write_inserts_a_row_of_its_client_plainly_or_the_drivers_prepared_way() -> None:
    (plain,), (prepared,) = statements(Op(A, Kind.WRITE), DISPLAY, 2), statements(Op(B, Kind.WRITE, "", PREPARED),
                                                                                     DISPLAY, 3)
    assert plain == Statement("INSERT INTO lc_writes (id, who) VALUES ('lc_A_row2', 'A') ON CONFLICT (id) DO NOTHING")
    assert prepared.via is Via.PROTOCOL
    assert "('lc_B_row3', 'B')" in prepared.sql


def test_free_bind_and_the_transaction_api_are_driver_calls_not_sql_of_ours() -> None:
    assert statements(Op(A, Kind.FREE), RUN) == (Statement("", Via.FREE),)
    assert statements(Op(A, Kind.BIND, "s2"), RUN) == (Statement("lc0badcafe_s2", Via.BIND),)
    assert [statements(Op(A, k), RUN) for k in (Kind.BEGIN, Kind.COMMIT, Kind.ROLLBACK)] == [
        (Statement("BEGIN", Via.DRIVER),), (Statement("COMMIT", Via.DRIVER),), (Statement("ROLLBACK", Via.DRIVER),)]
