"""The gate file: what --expect accepts, what --record writes, merges and never writes (pure, tmp_path)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from leakcheck.cli.main import main
from leakcheck.config import output_files
from leakcheck.gate import expectations, judge, record
from leakcheck.gate.baseline import Expectation
from leakcheck.model.errors import UsageError
from leakcheck.model.target import Route
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.probes import PROBES
from tests.pure.outcomes import at, make, pooler, with_controls

KEY_TZ = "pg16/pgbouncer1.24/psycopg/timezone"
KEY_ST = "pg16/pgbouncer1.24/psycopg/statement_timeout"
KEY_OLD = "pg15/pgbouncer1.18/asyncpg/timezone"


def outcome(probe: str, verdict: Verdict, bouncer: str = "1.24.1", route: Route = Route.TRANSACTION) -> Outcome:
    return make(probe, "16.14", bouncer, route, "psycopg", verdict, f"{probe} evidence")


def E(verdict: Verdict, reason: str = "") -> Expectation:  # noqa: N802 - reads like the value it makes
    return Expectation(verdict, reason)


def write(path: Path, verdicts: dict[str, str]) -> Path:
    path.write_text(json.dumps({"format": 1, "verdicts": verdicts}))
    return path


# --- --expect -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"format":1,"verdicts":null}', "verdicts is NoneType"),
        ('{"format":2,"verdicts":{}}', "format is 2"),
        ('{"verdicts":{}}', "format is None"),
        ("[]", "the top level is list"),
        ("{", "is not JSON"),
        ('{"format":1,"verdicts":{"timezone":"isolated"}}', "the key 'timezone' is not"),
        ('{"format":1,"verdicts":{"pg16/pgbouncer1.24/psycopg/timezone":"maybe"}}', "has the verdict 'maybe'"),
        ('{"format":1,"verdicts":{"pg16/pgbouncer1.24/psycopg/timezone":1}}', "has the verdict 1"),
    ],
)
def test_a_file_that_is_not_a_matrix_is_one_line_naming_what_is_wrong(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "m.json"
    path.write_text(content)
    with pytest.raises(UsageError, match="m.json") as caught:
        expectations.load(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_non_utf8_file_is_not_a_matrix(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(UsageError, match="not UTF-8"):
        expectations.load(path)


def test_a_folder_is_not_a_matrix_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is a folder"):
        expectations.load(tmp_path)


@pytest.mark.parametrize("refused", ["error", "skipped"])
def test_an_error_or_skipped_expectation_is_refused(tmp_path: Path, refused: str) -> None:
    path = write(tmp_path / "m.json", {KEY_TZ: "isolated", KEY_ST: refused})
    with pytest.raises(UsageError, match="an error never passes a gate; re-record"):
        expectations.load(path)


def test_a_matrix_with_no_verdicts_cannot_be_a_gate(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="holds no verdicts"):
        expectations.load(write(tmp_path / "m.json", {}))


def test_a_measured_error_never_passes_whatever_the_expectations_say() -> None:
    timezone = next(p for p in PROBES if p.id == "timezone")
    for expected in ({KEY_TZ: E(Verdict.ERROR)}, {KEY_TZ: E(Verdict.ISOLATED)}, {}):
        message = judge.problem(timezone, outcome("timezone", Verdict.ERROR), expected)
        assert message is not None and message.startswith("measured error")


# --- what --record writes -----------------------------------------------------------------------


def test_errors_and_skips_are_not_recorded_and_keep_the_previous_value() -> None:
    plan = record.plan(
        {KEY_TZ: E(Verdict.LEAKS)},
        [outcome("timezone", Verdict.ERROR), outcome("statement_timeout", Verdict.SKIPPED)],
    )
    assert plan.verdicts == {KEY_TZ: E(Verdict.LEAKS)}  # kept; statement_timeout has no entry
    assert plan.unrecorded == {KEY_TZ: "error", KEY_ST: "skipped"} and plan.unrecorded_kept == 1
    assert plan.measured == 0


def test_a_partial_run_keeps_the_entries_it_did_not_measure() -> None:
    plan = record.plan({KEY_OLD: E(Verdict.LOST), KEY_TZ: E(Verdict.LEAKS)},
                       with_controls(outcome("timezone", Verdict.ISOLATED)))
    assert plan.verdicts == {KEY_OLD: E(Verdict.LOST), KEY_TZ: E(Verdict.ISOLATED)}
    assert (plan.measured, plan.kept) == (1, 1)
    lines = record.summary(Path("m.json"), plan)
    assert lines == ["recorded 1 verdicts in m.json (1 kept from the previous file)"]


def test_controls_are_not_recorded() -> None:
    plan = record.plan({}, [outcome("timezone", Verdict.ISOLATED, bouncer="", route=Route.DIRECT)])
    assert plan.verdicts == {} and plan.measured == 0


@pytest.mark.parametrize("failed", [Route.DIRECT, Route.SHARED, Route.SESSION], ids=str)
def test_a_verdict_whose_control_failed_in_the_same_run_is_left_out_and_the_summary_says_why(failed: Route) -> None:
    # judge: a failed control means "this probe cannot be trusted here"; its pooled verdict is no measurement either
    run = with_controls(outcome("timezone", Verdict.LEAKS), failed=failed) + with_controls(
        outcome("statement_timeout", Verdict.LEAKS))
    plan = record.plan({KEY_TZ: E(Verdict.ISOLATED)}, run)
    assert plan.verdicts == {KEY_TZ: E(Verdict.ISOLATED), KEY_ST: E(Verdict.LEAKS)}  # the previous value kept
    assert plan.untrusted == {KEY_TZ: record.CONTROL_FAILED} and plan.measured == 1
    assert record.summary(Path("m.toml"), plan) == [
        "recorded 1 verdicts in m.toml (0 kept from the previous file; 1 left out, as their probe cannot be trusted "
        f"there (the file keeps what it had for them): 1 where a control failed, e.g. {KEY_TZ})"]


def test_a_verdict_without_its_controls_is_left_out() -> None:
    # --controls=no (refused with --record, below), -k, or a merge of files that hold no controls
    session_missing = [o for o in with_controls(outcome("timezone", Verdict.LEAKS)) if o.route is not Route.SESSION]
    for run in ([outcome("timezone", Verdict.LEAKS)], session_missing):
        plan = record.plan({}, run)
        assert plan.verdicts == {} and plan.untrusted == {KEY_TZ: record.NO_CONTROL}
        assert "1 where its controls did not run" in record.summary(Path("m.toml"), plan)[0]


def test_a_running_poolers_verdict_rests_on_its_direct_and_shared_controls() -> None:
    dsn = at("timezone", Verdict.LEAKS, pooler("dsn", config="staging"))  # no session mode to switch to
    assert [t.route for t in record.controls_of(dsn.target)] == [Route.DIRECT, Route.SHARED]
    assert record.plan({}, with_controls(dsn)).verdicts == {"pg16/dsn-staging/psycopg/timezone": E(Verdict.LEAKS)}


@pytest.mark.parametrize("args", [["--record=m.toml"], ["--expect=m.toml", "--update"]], ids=["record", "update"])
def test_record_or_update_with_no_controls_is_one_line_and_exit_4(
        args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "m.toml", {}).write_text('format = 2\n["pg16/pgbouncer1.24".psycopg]\ntimezone = "leaks"\n')
    assert main(["run", "--pg=16", "--bouncer=1.24", "--drivers=psycopg", "--probes=timezone", "--controls=no",
                 *args]) == 4
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "with --controls=no" in lines[0] and "leave out --controls=no" in lines[0], lines
    assert captured.out == ""


def test_two_patch_releases_that_disagree_on_one_key_are_not_recorded() -> None:
    plan = record.plan({}, with_controls(outcome("timezone", Verdict.ISOLATED, bouncer="1.24.0"),
                                         outcome("timezone", Verdict.LEAKS, bouncer="1.24.1")))
    assert plan.verdicts == {} and plan.unrecorded == {KEY_TZ: "measured differently: isolated/leaks"}


def test_error_entries_of_an_old_file_are_dropped_and_said_so() -> None:
    plan = record.plan({KEY_OLD: E(Verdict.ERROR)}, with_controls(outcome("timezone", Verdict.ISOLATED)))
    assert plan.verdicts == {KEY_TZ: E(Verdict.ISOLATED)} and plan.dropped == 1
    assert any("dropped 1 error/skipped" in line for line in record.summary(Path("m.json"), plan))


def test_the_summary_says_how_many_were_not_recorded_and_why() -> None:
    plan = record.plan({KEY_TZ: E(Verdict.LEAKS)}, with_controls(outcome("timezone", Verdict.ERROR),
                                                              outcome("statement_timeout", Verdict.LEAKS)))
    first, second = record.summary(Path("m.json"), plan)
    assert first == "recorded 1 verdicts in m.json (0 kept from the previous file)"
    assert second.startswith("1 verdicts not recorded (1 error: an error or a skip measured nothing; 1 kept")


def test_saving_merges_into_the_file_and_writes_only_measurements(tmp_path: Path) -> None:
    path = write(tmp_path / "m.json", {KEY_OLD: "lost", KEY_TZ: "leaks"})
    record.save(path, with_controls(outcome("timezone", Verdict.ERROR), outcome("statement_timeout", Verdict.LEAKS)))
    assert json.loads(path.read_text()) == {"format": 1, "verdicts": {KEY_OLD: "lost", KEY_ST: "leaks",
                                                                      KEY_TZ: "leaks"}}
    assert expectations.load(path)  # what --record writes, --expect accepts


# --- when --record writes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exitstatus", "stopped", "reason"),
    [
        (pytest.ExitCode.OK, False, None),
        (pytest.ExitCode.TESTS_FAILED, False, None),
        (pytest.ExitCode.INTERRUPTED, False, "the run was interrupted"),
        (pytest.ExitCode.TESTS_FAILED, True, "the run was interrupted"),
        (pytest.ExitCode.USAGE_ERROR, False, "the run did not complete (exit status 4)"),
        (pytest.ExitCode.INTERNAL_ERROR, False, "the run did not complete (exit status 3)"),
    ],
)
def test_only_a_run_that_ran_to_the_end_may_write(exitstatus: int, stopped: bool, reason: str | None) -> None:
    assert record.not_written(exitstatus, stopped) == reason


def test_an_interrupted_run_leaves_the_file_byte_identical(tmp_path: Path) -> None:
    path = write(tmp_path / "m.json", {KEY_OLD: "lost", KEY_TZ: "leaks"})
    before = path.read_bytes()
    reason = record.not_written(pytest.ExitCode.INTERRUPTED, stopped=True)
    if reason is None:  # what the plugin does: write only without a reason
        record.save(path, [outcome("timezone", Verdict.ISOLATED)])
    assert reason == "the run was interrupted" and path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


def test_writing_replaces_the_file_in_one_step_and_keeps_its_mode(tmp_path: Path) -> None:
    path = write(tmp_path / "m.json", {KEY_TZ: "leaks"})
    path.chmod(0o644)
    inode = path.stat().st_ino
    output_files.write_atomic(path, "new\n")
    assert path.read_text() == "new\n" and path.stat().st_ino != inode  # renamed over, not rewritten
    assert path.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]  # no temp file left


def test_writing_through_a_symlink_replaces_its_target(tmp_path: Path) -> None:
    target = write(tmp_path / "real.json", {KEY_TZ: "leaks"})
    link = tmp_path / "link.json"
    link.symlink_to(target)
    output_files.write_atomic(link, "new\n")
    assert link.is_symlink() and target.read_text() == "new\n"


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    path = write(tmp_path / "m.json", {KEY_TZ: "leaks"})
    before = path.read_bytes()
    with pytest.raises(UnicodeEncodeError):
        output_files.write_atomic(path, "\udcff")  # cannot be encoded: fails after the temp file exists
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


def test_writing_creates_missing_folders(tmp_path: Path) -> None:
    output_files.write_atomic(tmp_path / "a" / "b" / "m.json", "x\n")
    assert (tmp_path / "a" / "b" / "m.json").read_text() == "x\n"


# --- checking the --record target before the run -----------------------------------------------


def test_a_record_target_that_is_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is a folder"):
        record.check_target(tmp_path)


def test_a_record_target_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(UsageError, match="is a file"):
        record.check_target(tmp_path / "f" / "m.json")


def test_a_record_target_that_is_not_a_matrix_is_refused_before_the_run(tmp_path: Path) -> None:
    (tmp_path / "m.json").write_text("not json")
    with pytest.raises(UsageError, match="move it away"):
        record.check_target(tmp_path / "m.json")


def test_a_record_target_in_a_folder_that_cannot_be_created_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot create /proc/leakcheck"):
        record.check_target(Path("/proc/leakcheck/m.json"))


def test_checking_a_record_target_creates_nothing(tmp_path: Path) -> None:
    assert record.check_target(tmp_path / "new" / "m.json") == {}
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in any folder (see tests/servers/test_preflight.py)")
def test_a_record_target_in_a_folder_without_write_permission_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ro").mkdir(mode=0o555)
    with pytest.raises(UsageError, match="cannot write in"):
        record.check_target(tmp_path / "ro" / "m.json")


@pytest.mark.parametrize("pooler", ["pgbouncer1.24x2[peering=no]", "pgbouncer1.24+1.26[peering=yes]",
                                    "pgbouncer1.26x3"])
def test_a_fleet_s_key_is_a_baseline_key(tmp_path: Path, pooler: str) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(f'format = 2\n\n["pg16/{pooler}".asyncpg]\ncancel_routed = "lost"\n')
    assert list(expectations.load(path)) == [f"pg16/{pooler}/asyncpg/cancel_routed"]


def test_a_json_baseline_entry_with_a_reason_is_read_and_written_back_with_it(tmp_path: Path) -> None:
    # matrices/native-bookworm.json holds pgpool-II 4.3's lost asyncpg write: loses_writes needs a reason
    path = tmp_path / "native.json"
    path.write_text(json.dumps({"format": 1, "verdicts": {
        KEY_TZ: {"verdict": "loses_writes", "reason": "pgpool2#172"}, KEY_ST: "leaks"}}))
    loaded = expectations.load(path)
    assert loaded == {KEY_TZ: E(Verdict.LOSES_WRITES, "pgpool2#172"), KEY_ST: E(Verdict.LEAKS)}
    assert expectations.parse(expectations.render(loaded, path), "again", "") == loaded


def test_a_run_stopped_at_its_first_failure_writes_no_verdicts() -> None:
    # pytest -x and --maxfail stop the run through `shouldfail`, not `shouldstop`: before, --record wrote the
    # fraction of the matrix that ran
    from types import SimpleNamespace

    from leakcheck.plugin import stopped_early

    first_failure: Any = SimpleNamespace(shouldstop=False, shouldfail="stopping after 1 failures")
    assert record.not_written(pytest.ExitCode.TESTS_FAILED, stopped_early(first_failure)) == "the run was interrupted"
    to_the_end: Any = SimpleNamespace(shouldstop=False, shouldfail=False)
    assert record.not_written(pytest.ExitCode.TESTS_FAILED, stopped_early(to_the_end)) is None
