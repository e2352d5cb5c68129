"""Which probe explains a finding, and how differences are told apart (no servers)."""

from __future__ import annotations

import pytest

from leakcheck.discover.compare import Diff
from leakcheck.discover.known import (
    DISCOVERED,
    OUTCOME_PROBES,
    PROBE_OF,
    causes,
    confirmed,
    label,
    signature,
    state,
    states,
)
from leakcheck.discover.ops import PREPARED, UNIVERSE, Kind, Op, Who
from leakcheck.model.verdicts import Verdict
from leakcheck.probes import PROBES

A, B = Who.A, Who.B


def end(key: str, subject: str, reference: str, ops: int = 1, who: Who = B) -> Diff:
    """A difference in `who`'s final snapshot."""
    return Diff(ops + (who is B), who, key, subject, reference)


def test_every_mapped_probe_exists() -> None:
    assert set(PROBE_OF.values()) | OUTCOME_PROBES <= {p.id for p in PROBES}


def test_the_probes_written_from_discoveries_are_the_ones_known_labels_them_by() -> None:
    from leakcheck.probes.discovered import PROBES as WRITTEN

    assert {p.id for p in WRITTEN} == DISCOVERED


def test_every_state_changing_op_has_a_family() -> None:
    assert causes(UNIVERSE) and all(":" in f or f.isidentifier() for f in causes(UNIVERSE))


def test_set_and_session_set_config_change_the_same_state_and_local_ones_another() -> None:
    assert state("set:work_mem") == state("set_config_session:bound:work_mem") == "session:work_mem"
    assert state("set_local:work_mem") == state("set_config_local:work_mem") == "local:work_mem"
    assert states([Op(A, Kind.SET, "work_mem"), Op(A, Kind.EXECUTE, "s1")]) == {"session:work_mem"}
    assert state("temp_table:on_commit_delete_rows") == "temp_table" != state("temp_table:on_commit_drop")


def test_a_tracked_setting_seen_with_the_other_clients_value_is_its_probes() -> None:
    ops = (Op(A, Kind.SET, "statement_timeout"),)
    assert label(ops, [end("setting:statement_timeout", "'111s'", "'0'")]) == (("statement_timeout",), ())


def test_a_setting_no_probe_lists_is_new_by_its_state() -> None:
    ops = (Op(A, Kind.SET_CONFIG, "work_mem", "session"),)
    assert label(ops, [end("setting:work_mem", "'1111kB'", "'4MB'")]) == ((), ("session:work_mem",))


def test_a_listed_cause_with_an_effect_its_probe_does_not_observe_is_new() -> None:
    ops = (Op(B, Kind.SET_CONFIG, "app.tenant", "local"), Op(A, Kind.OBSERVE))
    probes, unlisted = label(ops, [end("setting:app.tenant", "'unexpected'", "NULL", who=A)])
    assert probes == ("rls_tenant_local",) and unlisted == ("effect: setting:app.tenant",)


def test_a_placeholder_found_by_discovery_is_now_its_probe_custom_setting_placeholder() -> None:
    ops = (Op(B, Kind.SET_CONFIG, "app.tenant", "local"),)
    assert label(ops, [end("setting:app.tenant", "''", "NULL", who=A)]) == (("custom_setting_placeholder",), ())


def test_an_op_result_of_a_setting_has_its_own_signature() -> None:
    ops = (Op(A, Kind.CREATE_TEMP, "t1", "on commit drop"), Op(B, Kind.SET_CONFIG, "temp_buffers", "local"))
    diff = Diff(1, B, "result:set_config", "error 22023: invalid value", "'2000kB'")
    assert signature(diff, ops) == "setting:temp_buffers/set_config result"
    # found by discovery, now a probe of its own
    assert label(ops, [diff]) == (("temp_buffers_blocked",), ())
    other = Diff(1, B, "result:set_config", "error 42501: permission denied", "'2000kB'")
    assert label(ops, [other])[1] == ("effect: setting:temp_buffers/set_config result",)


def test_read_only_explains_a_write_refused_with_25006() -> None:
    ops = (Op(A, Kind.SET, "default_transaction_read_only"), Op(B, Kind.CREATE_TEMP, "t1"))
    diff = Diff(1, B, "result:create_temp", "error 25006: cannot execute", "NULL")
    assert label(ops, [diff]) == (("read_only", "temp_table"), ())


def test_another_clients_protocol_statement_text_is_also_prepared_disclosure() -> None:
    ops = (Op(A, Kind.PROTOCOL, "p1"),)
    got = label(ops, [end("prepared", "['<protocol>=lc_A_p1']", "[]")])
    assert got == (("protocol_prepare", "prepared_disclosure"), ())


def test_a_finding_without_a_state_change_is_named_by_what_it_did() -> None:
    ops = (Op(B, Kind.RESET, "work_mem"),)
    assert label(ops, [end("setting:work_mem", "'64kB'", "'4MB'", who=A)]) == ((), ("reset:work_mem",))


@pytest.mark.parametrize(("key", "sig"), [
    ("setting:work_mem", "setting:work_mem"), ("reported:TimeZone", "setting:TimeZone"),
    ("prepared", "prepared statements"), ("result:execute", "prepared statements/execute result"),
    ("cursors", "cursors"), ("notifications", "listen/notify"), ("observe", "observe"),
])
def test_signatures_group_observations_by_the_state_they_read(key: str, sig: str) -> None:
    assert signature(end(key, "x", "y"), (Op(A, Kind.OBSERVE),)) == sig


def test_a_known_finding_stays_known_only_where_its_probe_reports_a_problem() -> None:
    ops = (Op(A, Kind.SET, "application_name"),)
    diffs = [end("setting:application_name", "'lc_app_a'", "''")]
    assert confirmed(ops, *label(ops, diffs), {"application_name": Verdict.LEAKS}) == ()
    assert confirmed(ops, *label(ops, diffs), {"application_name": Verdict.ISOLATED}) == (
        "set:application_name: its probe measured application_name isolated here",)
    assert confirmed(ops, (), ("session:x",), {}) == ("session:x",)


def test_prepared_disclosure_confirms_a_protocol_statement_another_client_reads() -> None:
    ops, diffs = (Op(A, Kind.PROTOCOL, "p1"),), [end("prepared", "['<protocol>=lc_A_p1']", "[]")]
    verdicts = {"protocol_prepare": Verdict.ISOLATED, "prepared_disclosure": Verdict.LEAKS}
    assert confirmed(ops, *label(ops, diffs), verdicts) == ()


def test_a_transaction_scoped_op_that_only_shows_another_clients_session_state_stays_known() -> None:
    ops = (Op(A, Kind.LOCK, "1"), Op(B, Kind.XACT_LOCK, "1"))
    diffs = [Diff(1, B, "result:xact_lock", "true", "false")]
    verdicts = {"advisory_lock": Verdict.LEAKS, "advisory_xact_lock": Verdict.ISOLATED}
    assert confirmed(ops, *label(ops, diffs), verdicts) == ()
    alone = (Op(B, Kind.XACT_LOCK, "1"),)
    assert confirmed(alone, *label(alone, diffs), verdicts) == (
        "advisory_xact_lock: its probe measured advisory_xact_lock isolated here",)


def test_a_result_failing_on_a_named_statement_is_about_prepared_statements_whatever_ran() -> None:
    ops = (Op(A, Kind.SET_CONFIG, "work_mem", "session bound"), Op(B, Kind.SET_CONFIG, "search_path", "session bound"))
    diff = Diff(1, B, "result:set_config", 'error 42P05: prepared statement "__asyncpg_stmt_1__" already exists', "x")
    assert signature(diff, ops) == "prepared statements/set_config result"


def test_findings_that_became_probes_are_known_by_those_probes() -> None:
    from leakcheck.discover.compare import Diff
    from leakcheck.discover.known import confirmed, label
    from leakcheck.discover.ops import Kind, Op, Who
    from leakcheck.model.verdicts import Verdict

    ops = (Op(Who.A, Kind.RESET, "app.tenant"),)
    placeholder = Diff(1, Who.B, "setting:app.tenant", "''", "NULL")
    assert label(ops, [placeholder]) == (("custom_setting_placeholder",), ())
    assert confirmed(ops, *label(ops, [placeholder]), {"custom_setting_placeholder": Verdict.LEAKS}) == ()
    assert confirmed(ops, *label(ops, [placeholder]), {"custom_setting_placeholder": Verdict.ISOLATED}) != ()


def test_a_placeholder_next_to_a_state_no_probe_lists_is_new_by_that_state() -> None:
    ops = (Op(A, Kind.SET_CONFIG, "app.tenant", "local"), Op(A, Kind.SET, "work_mem"))
    diffs = [end("setting:app.tenant", "''", "NULL", ops=2), end("setting:work_mem", "'1111kB'", "'4MB'", ops=2)]
    probes, unlisted = label(ops, diffs)
    assert "session:work_mem" in unlisted
    assert "session:work_mem" in confirmed(ops, probes, unlisted, {"custom_setting_placeholder": Verdict.LEAKS})


def test_a_client_losing_its_own_custom_setting_is_not_the_placeholder_leak() -> None:
    ops = (Op(A, Kind.SET_CONFIG, "app.tenant", "session"),)
    diffs = [end("setting:app.tenant", "NULL", "''", who=A)]
    probes, unlisted = label(ops, diffs)
    assert "custom_setting_placeholder" not in probes and unlisted == ("effect: setting:app.tenant",)
    assert confirmed(ops, probes, unlisted, {"custom_setting_placeholder": Verdict.LEAKS}) != ()


def test_a_placeholder_only_in_the_direct_session_is_not_the_placeholder_leak() -> None:
    ops = (Op(A, Kind.RESET, "app.tenant"),)
    probes, unlisted = label(ops, [end("setting:app.tenant", "NULL", "''")])
    assert probes == () and confirmed(ops, probes, unlisted, {"custom_setting_placeholder": Verdict.LEAKS}) != ()


def test_temp_buffers_refused_only_in_the_direct_session_is_not_temp_buffers_blocked() -> None:
    ops = (Op(A, Kind.CREATE_TEMP, "t1"), Op(B, Kind.SET, "temp_buffers"))
    diff = Diff(1, B, "result:set", "NULL", "error 22023: invalid value")
    probes, unlisted = label(ops, [diff])
    assert probes == ("temp_table",) and unlisted == ("effect: setting:temp_buffers/set result", "session:temp_buffers")
    assert confirmed(ops, probes, unlisted, {"temp_buffers_blocked": Verdict.LEAKS}) != ()


def test_temp_buffers_refused_after_the_clients_own_temp_table_is_not_temp_buffers_blocked() -> None:
    ops = (Op(B, Kind.CREATE_TEMP, "t1"), Op(B, Kind.SET_CONFIG, "temp_buffers", "local"))
    diff = Diff(1, B, "result:set_config", "error 22023: invalid value", "'2000kB'")
    probes, unlisted = label(ops, [diff])
    assert "temp_buffers_blocked" not in probes
    assert confirmed(ops, probes, unlisted, {"temp_buffers_blocked": Verdict.LEAKS}) != ()


def test_a_client_reading_back_the_default_instead_of_its_own_value_is_not_its_settings_leak() -> None:
    ops = (Op(A, Kind.SET, "statement_timeout"),)
    diffs = [end("setting:statement_timeout", "'0'", "'111s'", who=A)]
    probes, unlisted = label(ops, diffs)
    assert probes == ("statement_timeout",) and unlisted == ("effect: setting:statement_timeout",)
    assert confirmed(ops, probes, unlisted, {"statement_timeout": Verdict.LEAKS}) != ()


def test_a_client_reading_its_own_value_where_the_other_set_one_is_not_a_leak_of_the_others() -> None:
    ops = (Op(A, Kind.SET, "statement_timeout"), Op(B, Kind.SET, "statement_timeout"))
    diffs = [end("setting:statement_timeout", "'222s'", "'0'", ops=2)]
    assert label(ops, diffs)[1] == ("effect: setting:statement_timeout",)
    leaked = [end("setting:statement_timeout", "'111s'", "'222s'", ops=2)]
    assert label(ops, leaked) == (("statement_timeout",), ())


LOST_COMMIT = (Op(A, Kind.BEGIN), Op(A, Kind.WRITE, "", PREPARED), Op(A, Kind.FREE), Op(A, Kind.COMMIT))


def test_a_commit_lost_after_a_free_in_its_transaction_is_tx_free_before_commits_where_that_probe_loses_it() -> None:
    diffs = [Diff(3, A, "outcome:lost write", "its commit returned success, ...", "the row is in the database")]
    assert signature(diffs[0], LOST_COMMIT) == "outcome:lost write"
    got = label(LOST_COMMIT, diffs)
    assert got == (("tx_free_before_commit",), ())
    assert confirmed(LOST_COMMIT, *got, {"tx_free_before_commit": Verdict.LOSES_WRITES}) == ()
    assert confirmed(LOST_COMMIT, *got, {"tx_free_before_commit": Verdict.ISOLATED}) == (
        "tx_free_before_commit: its probe measured isolated here",)


def test_a_commit_lost_without_a_free_in_its_transaction_is_new_by_its_outcome() -> None:
    ops = (Op(A, Kind.WRITE, "", PREPARED), Op(A, Kind.FREE), Op(A, Kind.BEGIN), Op(A, Kind.WRITE), Op(A, Kind.COMMIT))
    assert label(ops, [Diff(4, A, "outcome:lost write", "x", "y")]) == ((), ("outcome:lost write",))


def test_a_disconnect_at_a_bind_and_the_other_clients_move_after_it_are_bind_unprepareds() -> None:
    ops = (Op(A, Kind.PREPARE, "s1"), Op(A, Kind.BIND, "s1"), Op(B, Kind.OBSERVE))
    assert label(ops, [Diff(1, A, "outcome:disconnected", "x", "y")]) == (("bind_unprepared",), ())
    assert label(ops, [Diff(2, B, "outcome:moved", "x", "y")]) == (("bind_unprepared",), ())
    assert label(ops, [Diff(2, A, "outcome:moved", "x", "y")]) == ((), ("outcome:moved",))
    protocol = (Op(A, Kind.DISCARD, "ALL"), Op(A, Kind.PROTOCOL, "p1"))
    assert label(protocol, [Diff(1, A, "outcome:disconnected", "x", "y")]) == ((), ("outcome:disconnected",))


def test_a_commit_lost_after_an_error_its_client_saw_is_labelled_by_that_error() -> None:
    ops = (Op(A, Kind.PREPARE, "s1"), Op(B, Kind.BEGIN), Op(B, Kind.WRITE), Op(B, Kind.PREPARE, "s1"),
           Op(B, Kind.COMMIT))
    told = Diff(4, B, "outcome:lost write", "its commit returned success, and B's row of step 3 is not in the "
                "database (an error reached B before: 42P05: ...)", "the row is in the database")
    refused = Diff(3, B, "result:prepare", 'error 42P05: prepared statement "lc_s1" already exists', "NULL")
    assert label(ops, [told, refused]) == (("sql_prepare",), ())
    silent = Diff(4, B, "outcome:lost write", "...; no error reached B", "the row is in the database")
    assert label(ops, [silent, refused]) == ((), ("outcome:lost write",))


def test_a_prepared_write_leaves_the_drivers_prepared_statement_as_a_prepared_select_does() -> None:
    ops = (Op(A, Kind.WRITE, "", PREPARED), Op(A, Kind.FREE))
    freed = Diff(1, A, "result:free", 'error 26000: prepared statement "a1" does not exist', "NULL")
    assert states(ops) == {"protocol_prepare"}
    assert label(ops, [freed]) == (("protocol_prepare",), ("effect: prepared statements/free result",))
    assert causes([Op(A, Kind.WRITE)]) == frozenset()
