"""scan's classes: each statement's session effects as PostgreSQL's parser reads it, and their probes."""

from __future__ import annotations

import pytest
from pglast.parser import ParseError

from leakcheck.model.verdicts import Scope
from leakcheck.probes import PROBES
from leakcheck.scan.classify import Classifier, Effect, Kind, Tx, classify
from leakcheck.scan.inputs import Ended, Sent
from leakcheck.scan.mapping import CUSTOM, DRIVER_NAMES, KINDS, LOCAL_CUSTOM, OTHER, PARAMETERS, driver_of, probes_for
from leakcheck.scan.workload import STATEMENTS, Workload


def effects(text: str) -> list[Effect]:
    return [e for statement in classify(text) for e in statement.effects]


@pytest.mark.parametrize(("text", "expected"), [
    ("SET statement_timeout = 5000", [Effect(Kind.SET, "statement_timeout")]),
    ("set Statement_Timeout to default", [Effect(Kind.SET, "statement_timeout")]),
    ("SET TIME ZONE 'UTC'", [Effect(Kind.SET, "timezone")]),
    ("SET NAMES 'LATIN1'", [Effect(Kind.SET, "client_encoding")]),
    ("SET LOCAL search_path = app", [Effect(Kind.SET_LOCAL, "search_path")]),
    ("SET TRANSACTION READ ONLY", []),
    ("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", [Effect(Kind.SESSION_CHARACTERISTICS)]),
    ("SELECT set_config('app.tenant', '42', false)", [Effect(Kind.SET_CONFIG, "app.tenant")]),
    ("SELECT pg_catalog.set_config('search_path', '', 'f')", [Effect(Kind.SET_CONFIG, "search_path")]),
    ("SELECT set_config('app.tenant', $1, true)", [Effect(Kind.SET_CONFIG_LOCAL, "app.tenant")]),
    ("SELECT set_config($1, $2, $3)", [Effect(Kind.SET_CONFIG_UNKNOWN, "?")]),
    ("SELECT set_config('app.tenant', '1', $1)", [Effect(Kind.SET_CONFIG_UNKNOWN, "app.tenant")]),
    ("SELECT app.set_config('x', 'y', false)", []),  # another schema's function of that name
    ("RESET ALL", [Effect(Kind.RESET, "ALL")]),
    ("RESET app.tenant", [Effect(Kind.RESET, "app.tenant")]),
    ("SET ROLE reporting", [Effect(Kind.SET_ROLE)]),
    ("RESET ROLE", [Effect(Kind.SET_ROLE)]),
    ("SET LOCAL ROLE reporting", [Effect(Kind.SET_LOCAL, "role")]),
    ("SELECT set_config('role', 'reporting', false)", [Effect(Kind.SET_ROLE)]),
    ("SET SESSION AUTHORIZATION bob", [Effect(Kind.SESSION_AUTHORIZATION)]),
    ("DISCARD ALL", [Effect(Kind.DISCARD, "ALL")]),
    ("DISCARD TEMP", [Effect(Kind.DISCARD, "TEMP")]),
    ("DEALLOCATE ALL", [Effect(Kind.DEALLOCATE_ALL)]),
    ("DEALLOCATE PREPARE s1", [Effect(Kind.DEALLOCATE)]),
    ("PREPARE s1 (int) AS SELECT $1", [Effect(Kind.PREPARE)]),
    ("EXECUTE s1 (5)", [Effect(Kind.EXECUTE)]),
    ("LISTEN jobs", [Effect(Kind.LISTEN)]),
    ("UNLISTEN *", [Effect(Kind.UNLISTEN)]),
    ("SELECT pg_advisory_lock(42)", [Effect(Kind.ADVISORY_LOCK, "pg_advisory_lock")]),
    ("SELECT * FROM pg_try_advisory_lock_shared(1, 2)", [Effect(Kind.ADVISORY_LOCK, "pg_try_advisory_lock_shared")]),
    ("SELECT pg_advisory_unlock_all()", [Effect(Kind.ADVISORY_UNLOCK, "pg_advisory_unlock_all")]),
    ("SELECT pg_advisory_xact_lock(hashtext('m'))", [Effect(Kind.ADVISORY_XACT_LOCK, "pg_advisory_xact_lock")]),
    ("CREATE TEMP TABLE t (a int)", [Effect(Kind.TEMP_TABLE)]),
    ("CREATE TEMPORARY TABLE t (a int) ON COMMIT DELETE ROWS", [Effect(Kind.TEMP_TABLE, "ON COMMIT DELETE ROWS")]),
    ("CREATE TEMP TABLE t ON COMMIT DROP AS SELECT 1", [Effect(Kind.TEMP_TABLE_ON_COMMIT_DROP)]),
    ("SELECT 1 AS a INTO TEMP t", [Effect(Kind.TEMP_TABLE)]),
    ("CREATE TEMP VIEW v AS SELECT 1", [Effect(Kind.TEMP_OBJECT, "VIEW")]),
    ("CREATE TABLE t (a int)", []),
    ("DECLARE c CURSOR WITH HOLD FOR SELECT 1", [Effect(Kind.CURSOR_WITH_HOLD)]),
    ("DECLARE c NO SCROLL CURSOR FOR SELECT 1", [Effect(Kind.CURSOR)]),
    ("SELECT currval('orders_id_seq'), 1", [Effect(Kind.SEQUENCE_STATE, "currval")]),
    ("INSERT INTO t VALUES (1) RETURNING lastval()", [Effect(Kind.SEQUENCE_STATE, "lastval")]),
    ("LOAD 'auto_explain'", [Effect(Kind.LOAD)]),
    ("SELECT 'SET statement_timeout = 1', 'pg_advisory_lock'", []),  # words in a string are no statement
])
def test_each_statement_has_the_session_effects_the_parser_reads(text: str, expected: list[Effect]) -> None:
    assert effects(text) == expected
    assert Classifier()(text)[1] == classify(text)  # the cached way says the same


def test_transaction_blocks_and_copy_are_marked_for_the_session_to_follow() -> None:
    said = classify("BEGIN; COPY t FROM STDIN; COMMIT AND CHAIN; ROLLBACK; COPY t TO '/tmp/x'")
    assert [(s.tx, s.copy) for s in said] == [(Tx.BEGIN, False), (None, True), (Tx.BEGIN, False), (Tx.END, False),
                                              (None, False)]


def test_a_statement_that_does_not_parse_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        Classifier()("SELEC 1")


def test_the_classifier_groups_statements_by_their_normalized_text() -> None:
    classifier = Classifier()
    assert classifier("SET statement_timeout = 5000")[0] == classifier("SET statement_timeout = 10")[0] \
        == "SET statement_timeout = $1"


def test_transaction_scoped_kinds_have_the_transaction_scope() -> None:
    assert Effect(Kind.SET_LOCAL, "x").scope is Scope.TRANSACTION and Effect(Kind.SET, "x").scope is Scope.SESSION
    assert Effect(Kind.TEMP_TABLE_ON_COMMIT_DROP).scope is Scope.TRANSACTION


def _sent(text: str, session: str | None = "1", prepared: str | None = None) -> Sent:
    return Sent(text, "log:1", session, 1, prepared)


def test_a_copy_is_outside_a_transaction_only_when_its_session_has_no_block_open() -> None:
    workload = Workload()
    for entry in [_sent("BEGIN"), _sent("COPY t FROM STDIN"), _sent("COMMIT"), _sent("COPY t FROM STDIN"),
                  _sent("COPY t TO STDOUT", session="2"), _sent("BEGIN", session="3"), Ended("3"),
                  _sent("COPY t FROM STDIN", session="3"), _sent("BEGIN; COPY t FROM STDIN; COMMIT", session="4"),
                  _sent("COPY t FROM STDIN", session=None)]:
        if isinstance(entry, Sent):
            workload.add(entry)
        else:
            workload.read("x", "stderr", [entry])
    outside = workload.found[Effect(Kind.COPY_OUTSIDE_TRANSACTION)]
    assert outside.count == 3  # session 1 after COMMIT, session 2, session 3 after it ended
    assert workload.found[Effect(Kind.COPY_TRANSACTION_UNKNOWN)].count == 1


def test_a_named_protocol_statement_is_counted_with_the_driver_its_name_points_to() -> None:
    workload = Workload()
    workload.add(_sent("SELECT 1", prepared="S_3"))
    workload.add(_sent("SELECT 2", prepared="a12"))
    workload.add(_sent("SELECT 3", prepared="mine"))
    workload.add(_sent("SELECT 4"))
    assert {e: f.count for e, f in workload.found.items()} == {
        Effect(Kind.PROTOCOL_PREPARE, "pgjdbc"): 1, Effect(Kind.PROTOCOL_PREPARE, "ruby-pg"): 1,
        Effect(Kind.PROTOCOL_PREPARE): 1}
    assert workload.drivers == {"pgjdbc": 1, "ruby-pg": 1, "?": 1}


def test_a_class_lists_its_first_distinct_statements_and_counts_the_others() -> None:
    workload = Workload()
    for i in range(STATEMENTS + 5):
        workload.add(Sent(f"SET work_mem = '{i}MB'; SELECT {i}, 'x{i}'" if i else "SET work_mem = 1", f"f:{i}"))
        workload.add(Sent(f"SELECT {i} FROM t{i}; SET work_mem = 2", f"g:{i}", calls=2))
    found = workload.found[Effect(Kind.SET, "work_mem")]
    assert found.count == (STATEMENTS + 5) * 3
    assert len(found.statements) == STATEMENTS and found.more > 0
    assert sum(s.count for s in found.statements.values()) + found.more == found.count


def test_statements_that_do_not_parse_are_counted_with_examples() -> None:
    workload = Workload()
    workload.add(Sent("SELEC 1", "log:7"))
    workload.add(Sent("SELECT 1", "log:8"))
    assert (workload.statements, workload.unparsed, workload.unparsed_examples) == (2, 1, [("log:7", "SELEC 1")])


# --- the map -------------------------------------------------------------------------------------


def test_every_probe_id_the_map_names_exists() -> None:
    known = {p.id for p in PROBES}
    named = {p for probes, _ in KINDS.values() for p in probes} | {p for ps in PARAMETERS.values() for p in ps}
    named |= set(CUSTOM) | set(OTHER) | set(LOCAL_CUSTOM)
    assert sorted(named - known) == []


def test_every_kind_has_an_entry_with_advice() -> None:
    assert set(KINDS) == set(Kind)
    assert all(advice.strip() for _, advice in KINDS.values())


@pytest.mark.parametrize(("effect", "probes"), [
    (Effect(Kind.SET, "statement_timeout"), ("statement_timeout",)),
    (Effect(Kind.SET_CONFIG, "search_path"), ("search_path",)),
    (Effect(Kind.SET, "app.tenant"), CUSTOM),
    (Effect(Kind.SET, "work_mem"), OTHER),
    (Effect(Kind.SET_LOCAL, "app.tenant"), LOCAL_CUSTOM),
    (Effect(Kind.SET_CONFIG_UNKNOWN, "?"), ("custom_setting", "rls_tenant", "rls_tenant_local")),
    (Effect(Kind.RESET, "ALL"), ()),
    (Effect(Kind.RESET, "app.tenant"), ("custom_setting_placeholder",)),
    (Effect(Kind.ADVISORY_LOCK, "pg_advisory_lock"), ("advisory_lock", "handover_advisory_lock")),
    (Effect(Kind.LOAD), ()),
])
def test_settings_map_by_parameter_and_other_kinds_by_kind(effect: Effect, probes: tuple[str, ...]) -> None:
    assert probes_for(effect) == probes


def test_statement_names_point_to_the_driver_that_names_them_so() -> None:
    assert [driver_of(n) for n in ("S_12", "lrupsc_1_0", "__asyncpg_stmt_3__", "_pg3_0", "pdo_stmt_0000000a", "a7",
                                   "abc", "")] == ["pgjdbc", "pgx", "asyncpg", "psycopg", "pdo", "ruby-pg", "", ""]
    assert len({d for _, d in DRIVER_NAMES}) == len(DRIVER_NAMES)
