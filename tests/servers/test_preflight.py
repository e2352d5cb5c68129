"""Misconfiguration is found once, before any test runs; a server that cannot start fails its cell once;
--record writes only measurements, only after a complete run, and says so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakcheck.config import preflight
from leakcheck.model.errors import UsageError
from leakcheck.model.versions import parse_spec
from leakcheck.provision.host.system import cache_root, server_user
from leakcheck.provision.postgres.binaries import resolve_pg

ONE = ["--drivers=psycopg", "--controls=no"]
#: --record writes a verdict only where its controls passed in the same run, so those runs keep them.
RECORDING = ["--drivers=psycopg"]
KEY_TZ = "pg16/pgbouncer1.24/psycopg/timezone"
KEY_DS = "pg16/pgbouncer1.24/psycopg/datestyle"


def one_usage_error(result: pytest.RunResult) -> str:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stderr.str()
    lines = [line for line in result.stderr.lines if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: "), lines
    return lines[0]


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder nobody can create files in: mode 0555, or as root (who ignores modes) a read-only tmpfs."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    mount = ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)]
    if subprocess.run(mount, capture_output=True, check=False).returncode != 0:
        pytest.skip("as root, a read-only folder needs a read-only mount (mount failed)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder every user can enter (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="leakcheck-test-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


# --- the environment, once ---------------------------------------------------------------------


def test_a_read_only_tmpdir_is_one_line_before_any_server_starts(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, read_only_folder: Path
) -> None:
    monkeypatch.setenv("TMPDIR", str(read_only_folder))
    line = one_usage_error(pytester.runpytest_inprocess("--pg=16", "--bouncer=1.24", "--probes=timezone", *ONE))
    assert f"cannot create files in TMPDIR={read_only_folder}" in line and "point TMPDIR at" in line


def test_a_missing_tmpdir_is_one_line(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                      tmp_path: Path) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "gone"))
    line = one_usage_error(pytester.runpytest_inprocess("--pg=16", "--bouncer=1.24", "--probes=timezone", *ONE))
    assert "is not an existing folder" in line


def test_a_temp_folder_without_enough_free_space_is_refused(tmp_path: Path) -> None:
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    assert preflight.free_space_problem(tmp_path, 0) is None
    problem = preflight.free_space_problem(tmp_path, free + 1024**3)
    assert problem is not None and "MB free, leakcheck needs" in problem
    with pytest.raises(UsageError, match="the temp folder is too full: .* free space, or point TMPDIR"):
        preflight.check_temp_folder({"TMPDIR": str(tmp_path)}, free + 1024**3)
    assert preflight.check_temp_folder({"TMPDIR": str(tmp_path)}, 1) == tmp_path


@pytest.mark.parametrize(
    ("run_as", "message"),
    [("leakcheck-no-such-user", "is not a user on this machine"), ("root", r"is root \(uid 0\)"), ("0", "is root")],
)
def test_a_bad_server_user_is_refused(monkeypatch: pytest.MonkeyPatch, run_as: str, message: str) -> None:
    monkeypatch.setenv("LEAKCHECK_RUN_AS", run_as)
    with pytest.raises(UsageError, match=message):
        server_user()


@pytest.mark.skipif(os.geteuid() != 0, reason="servers run as another user only when leakcheck runs as root")
def test_a_cache_the_server_user_cannot_read_is_one_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LEAKCHECK_CACHE", str(tmp_path / "cache"))  # under pytest's root-only folder
    line = one_usage_error(pytester.runpytest_inprocess("--pg=16", "--bouncer=1.24", "--probes=timezone", *ONE))
    assert f"the server user {server_user().name}" in line and f"cannot read {tmp_path / 'cache'}" in line


@pytest.mark.skipif(os.geteuid() != 0, reason="servers run as another user only when leakcheck runs as root")
def test_a_cache_under_a_folder_only_root_can_enter_names_that_folder(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    private = Path(tempfile.mkdtemp(prefix="leakcheck-rootonly-"))  # 0700, root's: the server user stops here
    try:
        (private / "inner").mkdir(mode=0o755)
        monkeypatch.setenv("LEAKCHECK_CACHE", str(private / "inner" / "cache"))
        line = one_usage_error(pytester.runpytest_inprocess("--pg=16", "--bouncer=1.24", "--probes=timezone", *ONE))
    finally:
        shutil.rmtree(private)
    assert f"({private} blocks it: that user cannot enter it)" in line


# --- a server that cannot start: once per cell ----------------------------------------------------


@pytest.fixture
def unstartable_pg(shared_folder: Path) -> str:
    """A PostgreSQL 16 bin dir whose libraries the server user cannot read: root reads its version,
    but postgres, run as the server user, cannot load them and exits at once (code 127)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the server user must differ from the user that reads the version")
    source = resolve_pg(parse_spec("16", "--pg"), cache_root()).bindir.parent
    copy = shared_folder / "pg16"
    if subprocess.run(["cp", "-al", str(source), str(copy)], capture_output=True, check=False).returncode != 0:
        subprocess.run(["cp", "-a", str(source), str(copy)], check=True)  # another file system: copy
    (copy / "lib").chmod(0o700)  # a new folder even with hard links: the cached install is untouched
    return str(copy / "bin")


@pytest.mark.servers
def test_a_server_that_fails_to_start_is_reported_once_and_its_cell_fails_fast(
    pytester: pytest.Pytester, unstartable_pg: str
) -> None:
    result = pytester.runpytest_inprocess(f"--pg={unstartable_pg}", "--bouncer=1.24", "--probes=timezone,datestyle",
                                          *ONE, "-v")
    result.assert_outcomes(failed=2)
    # The failures section (pytest under CI=true repeats whole messages in its short summary).
    text = result.stdout.str().split("short test summary info")[0]
    assert text.count("--- last lines of its log ---") == 1  # the log tail, once
    assert "It said: while loading shared libraries" in text  # its own first error, on the first line
    result.stdout.fnmatch_lines([
        "ERROR: the harness failed: StartError: PostgreSQL 16.* did not start: *",
        "*error while loading shared libraries*",
        "ERROR: the harness failed: NotAvailable: PostgreSQL 16.* is not available: it failed in "
        "test_leak?pg16.*-pgbouncer1.24.*-psycopg*-timezone? (see that failure): *",
    ])


@pytest.mark.servers
def test_a_measured_error_is_not_recorded_and_keeps_the_previous_value(
    pytester: pytest.Pytester, unstartable_pg: str
) -> None:
    path = pytester.path / "m.json"
    path.write_text(json.dumps({"format": 1, "verdicts": {KEY_TZ: "isolated"}}))
    result = pytester.runpytest_inprocess(f"--pg={unstartable_pg}", "--bouncer=1.24", "--probes=timezone,datestyle",
                                          *RECORDING, "--record=m.json")
    result.assert_outcomes(failed=8)  # the controls too
    assert json.loads(path.read_text())["verdicts"] == {KEY_TZ: "isolated"}  # datestyle: no entry
    result.stdout.fnmatch_lines([
        "leakcheck: recorded 0 verdicts in m.json (0 kept from the previous file)",
        "leakcheck: 2 verdicts not recorded (2 error: an error or a skip measured nothing; 1 kept the previous*",
    ])
    gate = pytester.runpytest_inprocess(f"--pg={unstartable_pg}", "--bouncer=1.24", "--probes=timezone", *ONE,
                                        "--expect=m.json")
    gate.assert_outcomes(failed=1)  # the file says isolated; an error never passes
    assert "measured error, which never passes a gate" in gate.stdout.str()


# --- when --record writes -----------------------------------------------------------------------

INTERRUPT_AFTER_FIRST_TEST = """
def pytest_runtest_logfinish(nodeid, location):
    if "test_leak" in nodeid:
        raise KeyboardInterrupt  # what Ctrl-C raises
"""


@pytest.mark.servers
def test_an_interrupted_run_writes_nothing_and_says_so(pytester: pytest.Pytester) -> None:
    path = pytester.path / "m.json"
    path.write_text(json.dumps({"format": 1, "verdicts": {KEY_TZ: "leaks", KEY_DS: "leaks"}}, indent=1))
    before = path.read_bytes()
    pytester.makeconftest(INTERRUPT_AFTER_FIRST_TEST)
    result = pytester.runpytest_inprocess("--pg=16", "--bouncer=1.24", "--probes=timezone,datestyle", *RECORDING,
                                          "--record=m.json", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert path.read_bytes() == before
    result.stdout.fnmatch_lines(["leakcheck: m.json not recorded: the run was interrupted (the file is unchanged)"])
    assert "recorded 1 verdicts" not in result.stdout.str()


@pytest.mark.servers
def test_a_partial_run_updates_what_it_measured_and_keeps_the_rest(pytester: pytest.Pytester) -> None:
    path = pytester.path / "m.json"
    path.write_text(json.dumps({"format": 1, "verdicts": {KEY_TZ: "leaks", KEY_DS: "leaks"}}))
    result = pytester.runpytest_inprocess("--pg=16", "--bouncer=1.24", "--probes=timezone", *RECORDING,
                                          "--record=m.json")
    result.assert_outcomes(passed=4)  # and its three controls
    assert json.loads(path.read_text())["verdicts"] == {KEY_TZ: "isolated", KEY_DS: "leaks"}
    result.stdout.fnmatch_lines(["leakcheck: recorded 1 verdicts in m.json (1 kept from the previous file)"])


REPLACE_RECORD_FOLDER_WITH_A_FILE = """
import shutil
from pathlib import Path

def pytest_collection_finish(session):
    out = Path("out")
    shutil.rmtree(out)
    out.write_text("someone replaced the folder with a file during the run")
"""


@pytest.mark.servers
def test_a_record_that_cannot_be_written_at_the_end_is_one_line_and_a_failed_run(pytester: pytest.Pytester) -> None:
    (pytester.path / "out").mkdir()
    pytester.makeconftest(REPLACE_RECORD_FOLDER_WITH_A_FILE)
    result = pytester.runpytest_inprocess("--pg=16", "--bouncer=1.24", "--probes=timezone,statement_timeout",
                                          *RECORDING, "--record=out/m.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=7, failed=1)
    text = result.stdout.str()
    assert "Traceback" not in text and "Traceback" not in result.stderr.str()
    result.stdout.fnmatch_lines([
        "*leakcheck matrix*",
        "timezone*isolated*",
        "leakcheck: 1 leak test failed on the verdict the matrix shows*",  # its failure block, folded
        "leakcheck: out/m.json not recorded: writing it failed (*); the file is unchanged",
    ])


@pytest.mark.servers
def test_a_record_that_cannot_be_written_fails_an_otherwise_green_run(pytester: pytest.Pytester) -> None:
    (pytester.path / "out").mkdir()
    pytester.makeconftest(REPLACE_RECORD_FOLDER_WITH_A_FILE)
    result = pytester.runpytest_inprocess("--pg=16", "--bouncer=1.24", "--probes=timezone", *RECORDING,
                                          "--record=out/m.json")
    result.assert_outcomes(passed=4)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
