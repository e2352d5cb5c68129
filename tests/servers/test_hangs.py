"""Every wait has a bound: a pooler that stops answering or a server that dies fails its cell, the run goes
on, and a stop signal during such a hang ends the run within seconds, leaving nothing running.

Real servers, stopped with SIGSTOP or killed with SIGKILL by the test. The only timing checks are generous
bounds: a few times the bounds the README states (console 5 s, connect 3 s, probe 30 s, clean-up 2 s + stop).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakcheck.drivers.agents.catalogue import shipped
from leakcheck.drivers.agents.install import missing_apt
from leakcheck.model.target import Driver, Pooler, PoolerKind, Route, Target
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.model.versions import parse_spec
from leakcheck.probes import PROBES
from leakcheck.provision.host import tagged
from leakcheck.provision.host.owner import start_time
from leakcheck.provision.host.proc_sockets import children_of
from leakcheck.provision.host.sysv_shm import attached, recorded_segment
from leakcheck.provision.native import NativeBackend
from leakcheck.provision.pgbouncer.process import BouncerProcess
from leakcheck.run.failfast import FailFast
from leakcheck.run.runner import PROBE_TIMEOUT, pool_settings, pooler_lane, run_probe
from tests.support.agents import agent_folder, hello, recorded, running, write_agent
from tests.support.processes import cmdline, server_on

pytestmark = pytest.mark.servers

#: The console's 5 s and a connect's 3 s, three times over.
STOPPED_POOLER_BOUND = 3 * (5 + 3)


class Cell:
    """PostgreSQL 16 and PgBouncer 1.24 on a backend of the test's own, as a matrix run uses it."""

    def __init__(self, backend: NativeBackend) -> None:
        self.backend = backend
        self.run = FailFast(backend)  # as matrix runs wrap it: a server that failed once fails fast
        self.pg = backend.resolve_pg(parse_spec("16", "--pg"))
        self.pooler = Pooler(PoolerKind.PGBOUNCER, backend.resolve_pooler(PoolerKind.PGBOUNCER,
                                                                           parse_spec("1.24", "--bouncer")))

    def probe(self, route: Route = Route.TRANSACTION, probe: str = "timezone") -> Outcome:
        chosen = next(p for p in PROBES if p.id == probe)
        pooler = self.pooler if route is not Route.DIRECT else None
        return run_probe(self.run, chosen, Target(self.pg, pooler, route, Driver.PSYCOPG))

    def pooler_port(self) -> int:
        """The port of the PgBouncer process the timezone probe uses."""
        target = Target(self.pg, self.pooler, Route.TRANSACTION, Driver.PSYCOPG)
        settings = pool_settings(next(p for p in PROBES if p.id == "timezone"), target)
        assert settings is not None
        with self.backend.pooler(self.pg, self.pooler, settings, pooler_lane(target)) as endpoint:
            return endpoint.port


@pytest.fixture
def cell() -> Iterator[Cell]:
    with NativeBackend() as backend:
        yield Cell(backend)


def test_a_stopped_pgbouncer_fails_its_cell_with_one_line_naming_it_and_the_run_goes_on(cell: Cell) -> None:
    assert cell.probe().verdict is not Verdict.ERROR  # its PgBouncer runs and answers
    bouncer = server_on(cell.pooler_port())
    os.kill(bouncer, signal.SIGSTOP)
    started = time.monotonic()
    outcomes = [cell.probe() for _ in range(3)]
    took = time.monotonic() - started

    assert [o.verdict for o in outcomes] == [Verdict.ERROR] * 3
    assert "PgBouncer" in outcomes[0].evidence and "\n" not in outcomes[0].evidence
    assert "stopped" in outcomes[0].evidence
    assert all("PgBouncer" in o.evidence for o in outcomes[1:])
    assert took < STOPPED_POOLER_BOUND, f"a stopped PgBouncer held its cell for {took:.0f} s"
    # The rest of the run goes on: the same PostgreSQL, directly, still measures.
    assert cell.probe(Route.DIRECT).verdict is not Verdict.ERROR


def test_a_killed_postmaster_fails_its_cell_at_once_and_leaves_no_shared_memory_nor_folders() -> None:
    with NativeBackend() as backend:
        cell = Cell(backend)
        assert cell.probe().verdict is not Verdict.ERROR  # PostgreSQL and its PgBouncer run
        port = backend.postgres(cell.pg).port
        postmaster = server_on(port)
        data = Path(os.readlink(f"/proc/{postmaster}/cwd"))  # it runs in its data folder
        folder = data.parent
        segment = recorded_segment(data / "postmaster.pid")
        assert segment is not None and attached(segment)
        os.kill(postmaster, signal.SIGKILL)
        while Path(f"/proc/{postmaster}/stat").read_text().split()[2] not in "ZX":
            time.sleep(0.01)
        started = time.monotonic()
        pooled, direct = cell.probe(), cell.probe(Route.DIRECT)
        took = time.monotonic() - started

        for outcome in (pooled, direct):
            assert outcome.verdict is Verdict.ERROR
            assert f"PostgreSQL {cell.pg}" in outcome.evidence and "SIGKILL" in outcome.evidence
        assert took < PROBE_TIMEOUT, f"a dead PostgreSQL took {took:.0f} s to fail its cell"
    assert attached(segment) is None, f"shared memory segment {segment.shmid} remains"
    assert not folder.exists()


#: A leakcheck command whose PgBouncer is stopped (SIGSTOP) while it resets the pool, as in a run.
_HUNG_COMMAND = textwrap.dedent("""
    import os, signal, sys
    from leakcheck.cli.exits import guarded
    from leakcheck.provision.native import NativeBackend
    from leakcheck.model.pool_settings import PoolMode, PoolSettings
    from leakcheck.model.target import Pooler, PoolerKind
    from leakcheck.model.versions import parse_spec

    def body():
        with NativeBackend() as backend:
            pg = backend.resolve_pg(parse_spec("16", "--pg"))
            pooler = Pooler(PoolerKind.PGBOUNCER, backend.resolve_pooler(PoolerKind.PGBOUNCER, parse_spec("1.24", "-")))
            settings = PoolSettings(PoolMode.TRANSACTION, 1)
            with backend.pooler(pg, pooler, settings) as endpoint:
                print(endpoint.port, flush=True)
            os.kill(int(sys.stdin.readline()), signal.SIGSTOP)
            print("stopped", flush=True)
            while True:  # every use resets the pool on the stopped PgBouncer's console
                try:
                    with backend.pooler(pg, pooler, settings):
                        pass
                except Exception:
                    pass
        return 0

    sys.exit(guarded(body))
""")


def test_sigterm_while_the_pgbouncer_is_stopped_ends_the_command_within_seconds_and_nothing_is_left() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _HUNG_COMMAND], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, text=True)
    with proc:
        try:
            assert proc.stdout is not None and proc.stdin is not None
            port = int(proc.stdout.readline())
            bouncer = server_on(port, proc.pid)
            started = start_time(bouncer)
            proc.stdin.write(f"{bouncer}\n")
            proc.stdin.flush()
            assert proc.stdout.readline() == "stopped\n"
            time.sleep(1.0)  # now inside a reset on the stopped console
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(15)  # the clean-up bound (a console wait, 2 s, a 3 s stop), three times over
            except subprocess.TimeoutExpired:
                pytest.fail("SIGTERM did not end a command waiting on a stopped PgBouncer within 15 s")
            assert code == 130, proc.stderr.read() if proc.stderr else ""
            assert start_time(bouncer) != started, "the stopped PgBouncer is still there"
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _bouncer_of(session: int) -> int | None:
    """The transaction-mode PgBouncer a matrix run under `session` started, once it runs."""
    for pid in children_of(session):
        argv = cmdline(pid)
        ini = next((Path(a) for a in argv if a.endswith("pgbouncer.ini")), None)
        if ini is not None and "pool_mode = transaction\n" in ini.read_text():
            return pid
    return None


def test_sigterm_while_a_lane_waits_on_a_stopped_pgbouncer_ends_the_matrix_run_within_seconds(
    tmp_path: Path,
) -> None:
    # The matrix itself, not one command: a lane thread sits in the pool reset on the stopped console
    # while the main thread is told to stop (before the console had a deadline, close() waited on it).
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--rootdir={tmp_path}", str(tmp_path),
         "--pg=16", "--bouncer=1.24", "--drivers=psycopg", "--controls=no", "--jobs=1", "-v"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, text=True)
    bouncer = None
    with proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:  # the first probe's result: the pooler runs and is between probes
                if "test_leak[" in line and ("PASSED" in line or "FAILED" in line):
                    break
            bouncer = _bouncer_of(proc.pid)
            assert bouncer is not None, "no transaction-mode PgBouncer under the run"
            os.kill(bouncer, signal.SIGSTOP)
            time.sleep(1.0)  # the next probe's reset now waits on the stopped console
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOPPED_POOLER_BOUND)
            except subprocess.TimeoutExpired:
                pytest.fail(f"SIGTERM did not end a matrix run on a stopped PgBouncer within {STOPPED_POOLER_BOUND} s")
            assert not Path(f"/proc/{bouncer}").exists() or cmdline(bouncer) == [""], "the PgBouncer is left"
            assert not children_of(proc.pid), "the run left processes behind"
        finally:
            if bouncer is not None and Path(f"/proc/{bouncer}").exists():
                os.kill(bouncer, signal.SIGCONT)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_a_pgbouncer_that_dies_in_its_reset_is_named_as_exited_with_its_log_not_as_a_failed_reset(
    cell: Cell, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As PgBouncer 1.18.0 did on a KILL while it forwarded a cancel (pgbouncer#801): the process ends
    # inside the reset, and the reset's own error ("could not reset ...") hid why.
    assert cell.probe().verdict is not Verdict.ERROR
    bouncer = server_on(cell.pooler_port())
    reset = BouncerProcess.reset

    def dies_in_reset(process: BouncerProcess) -> None:
        os.kill(bouncer, signal.SIGKILL)
        reset(process)

    monkeypatch.setattr(BouncerProcess, "reset", dies_in_reset)
    outcome = cell.probe()
    assert outcome.verdict is Verdict.ERROR
    assert "exited during the run" in outcome.evidence and "its log ends" in outcome.evidence, outcome.evidence


@pytest.fixture
def folder() -> Iterator[Path]:
    yield from agent_folder()


_CELL = ("--pg=16", "--bouncer=1.24")

#: A team agent that answers hello, then never answers `connect`, and ignores SIGTERM, SIGINT and the end of its
#: input; it starts a helper that closed its stdio, and records both.
_STUBBORN_AGENT = """
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
record(os.getpid())
helper = subprocess.Popen(['sleep', '300'], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
record(helper.pid)
""" + hello(driver="stubborn", then="time.sleep(600)")


@contextlib.contextmanager
def _leakcheck(cwd: Path, *argv: str) -> Iterator[subprocess.Popen[str]]:
    """A `leakcheck` command in a session of its own, SIGKILLed with all in it if it is still there at the end."""
    with subprocess.Popen([sys.executable, "-m", "leakcheck.cli.main", *argv], cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, start_new_session=True, text=True) as proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _output_within(proc: subprocess.Popen[str], seconds: float, what: str) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} within {seconds:.0f} s")


def test_ctrl_c_while_agents_ignore_every_signal_ends_the_run_within_seconds_without_a_traceback_or_a_process_left(
    tmp_path: Path, folder: Path
) -> None:
    path = write_agent(folder, _STUBBORN_AGENT, "stubborn")
    with _leakcheck(tmp_path, "run", *_CELL, f"--drivers=cmd:{path}", "--probes=timezone", "--controls=yes") as proc:
        checked = recorded(path, at_least=2, within=60)  # the preflight's hello check, stopped
        assert len(checked) == 2
        started = recorded(path, at_least=6, within=60)  # then the lanes' A agents, hanging in connect
        assert len(started) >= 6, "the lanes' agents did not start"
        assert running(checked) == [], "the preflight left its agent running"
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        # the lanes' 2 s, the agents' 1 s (together), the servers' stop
        _, err = _output_within(proc, 12, "Ctrl-C did not end a run whose agents ignore every signal")
    assert proc.returncode == 130, err
    assert err.rstrip().endswith("leakcheck: interrupted"), err  # no traceback after it
    assert "Traceback" not in err and "exception" not in err, err
    assert running(recorded(path, at_least=0)) == [], "agents or their helpers outlived the run"


#: A team agent that, once asked to connect, starts a child that keeps its stdout and stderr open, answers every
#: request after `hello` with `unsupported`, and ends at the end of its input.
_PIPE_HOLDER = hello(driver="piped", then="""
for line in sys.stdin:
    request = json.loads(line)
    if request["op"] == "connect" and not os.path.exists(os.path.join(HERE, "piped.pids")):
        record(subprocess.Popen(['sleep', '300']).pid)
    answer = {"id": request["id"], "ok": False, "error": {"class": "unsupported", "sqlstate": "", "message": "no"}}
    print(json.dumps(answer), flush=True)
""")


def test_a_run_whose_agent_left_a_child_holding_its_stdout_ends_and_the_child_with_it(
    tmp_path: Path, folder: Path
) -> None:
    # Before: the end of the run waited for ever on the agent's stdout, PostgreSQL and PgBouncer left running.
    path = write_agent(folder, _PIPE_HOLDER, "piped")
    with _leakcheck(tmp_path, "run", *_CELL, f"--drivers=cmd:{path}", "--probes=timezone", "--controls=no") as proc:
        out, err = _output_within(proc, 120, "the run did not end")
    assert proc.returncode == 1, err  # the probe is an error: the agent refused to connect
    assert "refused 'connect' (unsupported)" in out, out
    child = recorded(path, at_least=1)
    assert child and running(child) == [], "the agent's child outlived the run"


#: A team agent that answers hello, connect and close, hangs on its first statement (recording it), and ignores
#: SIGTERM, SIGINT and the end of its input.
_HANGS_ON_A_STATEMENT = """
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
record(os.getpid())
""" + hello(driver="hangs", then="""
for line in sys.stdin:
    request = json.loads(line)
    if request["op"] not in ("connect", "close"):
        record(os.getpid(), "hung")
        break
    print(json.dumps({"id": request["id"], "ok": True}), flush=True)
time.sleep(600)
""")


def test_ctrl_c_while_discover_waits_on_a_hung_agent_ends_within_seconds_and_leaves_nothing(
    tmp_path: Path, folder: Path
) -> None:
    # Before: the closing event loop let each client's close wait 5 s on the hung agent, then stopped it.
    path = write_agent(folder, _HANGS_ON_A_STATEMENT, "hangs")
    with _leakcheck(tmp_path, "discover", *_CELL, f"--driver=cmd:{path}", "--budget=2m", "--database=none",
                    "--out=none") as proc:
        assert recorded(path, "hung", within=120), "the agent was never asked a statement"
        proc.send_signal(signal.SIGINT)
        _, err = _output_within(proc, 8, "Ctrl-C did not end discover waiting on a hung agent")  # agents' 1 s, servers
    assert proc.returncode == 130, err
    assert err.rstrip().endswith("leakcheck: interrupted") and "Traceback" not in err, err
    assert running(recorded(path, at_least=0)) == [], "an agent outlived discover"


def _activerecord_processes(run: int) -> list[int]:
    """The ActiveRecord preloader and agents of the leakcheck process `run` (their tag names it)."""
    return [pid for pid, value in tagged._tagged() if value.split(".")[0] == str(run)]


def test_ctrl_c_while_activerecord_agents_run_ends_their_preloader_and_its_forks(tmp_path: Path) -> None:
    found = shipped("activerecord")
    assert found is not None
    if missing_apt(found.spec):
        pytest.skip("activerecord agent: its Debian packages are missing")
    with _leakcheck(tmp_path, "run", *_CELL, "--drivers=activerecord", "--controls=no") as proc:
        until = time.monotonic() + 120
        while len(started := _activerecord_processes(proc.pid)) < 3 and time.monotonic() < until:
            time.sleep(0.05)
        assert len(started) >= 3, "the preloader and its agents did not start"
        names = {(cmdline(pid) or [""])[0] for pid in started}
        assert "leakcheck-activerecord-preloader" in names, names
        proc.send_signal(signal.SIGINT)
        _, err = _output_within(proc, 30, "Ctrl-C did not end a run of ActiveRecord agents")
    assert proc.returncode == 130, err
    assert running(started) == [] and _activerecord_processes(proc.pid) == [], "agents outlived the run"
