"""A server killed (SIGKILL) or stopped (SIGSTOP) at any moment of a run, or the run itself killed, leaves nothing
behind: no process, folder (with its sockets) or System V object of that run, once the run ended (or, for a
killed run, once `leakcheck sweep` ran). The run notices the fault: its outcomes are errors, never verdicts.

Each test starts a real `leakcheck run` in its own session with its own TMPDIR, and hits one process at a chosen
moment: mid-run from outside, once a probe runs through the pooler; at start-up from inside (the run's spawn of
the pooler hits it at once, or once pgpool-II made its segment). The run's processes are its descendants and the
members of their sessions (pgpool-II's children outlive their main process), looked at every few milliseconds;
its System V objects are those these processes created (/proc/sysvipc: a segment's creator, a semaphore's last
pid). Another run on this machine is never counted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from leakcheck.model.versions import parse_spec
from leakcheck.provision.host.owner import owner_of, start_time
from leakcheck.provision.host.proc_sockets import PGPOOL_IDLE, title_of
from leakcheck.provision.host.strays import program_in
from leakcheck.provision.host.system import ServerUser, cache_root, server_user
from leakcheck.provision.host.sysv import Row, last_pids, remove, rows
from leakcheck.provision.postgres.binaries import resolve_pg
from leakcheck.provision.postgres.server import PgServer
from tests.support.processes import cmdline
from tests.support.servers import enterable_folder

pytestmark = pytest.mark.servers

TIMEOUT = 60.0
#: statement_timeout's 1 s sleep keeps a probe running through the pooler; the others run after the fault.
PROBES = ("--probes=statement_timeout,timezone,temp_table,idle_in_transaction_timeout", "--drivers=psycopg",
          "--controls=no", "--jobs=1")
POOLERS = {"pgpool": "--pooler=pgpool:4.3", "odyssey": "--pooler=odyssey:1.5", "pgbouncer": "--bouncer=1.24"}
#: pgpool-II's children that serve no client (4.3.5's process titles).
PGPOOL_AUX = (PGPOOL_IDLE, "pgpool: PCP: wait for connection request", "pgpool: worker process",
              "pgpool: health check process")

#: `leakcheck run` whose spawn of a pooler of KIND sends it SIGNUM at once (pgpool-II: once it made its segment).
AT_SPAWN = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from leakcheck.cli.main import main
    from leakcheck.provision.host.pooler_process import PoolerProcess

    signum, kind = int(sys.argv[1]), sys.argv[2]
    spawn = PoolerProcess._spawn

    def made_segment(pid):
        table = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
        return any(row.split()[4] == str(pid) for row in table)

    def hit(self):
        spawn(self)
        pid = self._process.pid
        deadline = time.monotonic() + 10
        while self.name == "pgpool" and not made_segment(pid) and time.monotonic() < deadline:
            time.sleep(0.001)
        if self.name == kind:
            os.kill(pid, signum)

    PoolerProcess._spawn = hit
    sys.exit(main(["run", *sys.argv[3:]]))
""")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    sid: int
    start: int


def _processes() -> dict[int, Proc]:
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            found[int(name)] = Proc(int(name), int(fields[1]), int(fields[3]), int(fields[19]))
    return found


def _argv(pid: int) -> list[str]:
    return cmdline(pid) or [""]  # [""]: gone


class Run:
    """A `leakcheck run` in its own session, and every process it has had (see the module's doc)."""

    def __init__(self, tmp: Path, out: Path, argv: list[str]) -> None:
        self.tmp, self.out = tmp, out
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")} | {"TMPDIR": str(tmp)}
        self.since = int(time.time())
        with open(out, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, *argv], env=env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        started = start_time(self.proc.pid)
        assert started is not None
        self.seen = {self.proc.pid: started}

    def look(self) -> list[int]:
        """Take in the processes that descend from the run or joined a session of its; the run's processes now."""
        now = _processes()
        grew = True
        while grew:
            grew = False
            for p in now.values():
                if self.seen.get(p.pid) == p.start:
                    continue
                parent = now.get(p.ppid)
                if (parent is not None and self.seen.get(parent.pid) == parent.start) or p.sid in self.seen:
                    self.seen[p.pid] = p.start
                    grew = True
        return [p.pid for p in now.values() if self.seen.get(p.pid) == p.start]

    def until(self, find: Callable[[list[int]], int | None], what: str) -> int:
        """Look every few milliseconds until `find` names one of the run's processes."""
        deadline = time.monotonic() + TIMEOUT
        while (pid := find(self.look())) is None:
            assert self.proc.poll() is None, f"the run ended before {what}:\n{self.output()}"
            assert time.monotonic() < deadline, f"no {what} within {TIMEOUT:.0f} s:\n{self.output()}"
            time.sleep(0.005)
        return pid

    def wait(self) -> int:
        """Until the run ends by itself (looking on: a process it starts late is its too); its exit code."""
        deadline = time.monotonic() + TIMEOUT
        while self.proc.poll() is None:
            self.look()
            assert time.monotonic() < deadline, f"the run did not end within {TIMEOUT:.0f} s:\n{self.output()}"
            time.sleep(0.02)
        return self.proc.returncode

    def kill(self) -> None:
        self.look()
        self.proc.kill()
        self.proc.wait()

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def objects(self) -> list[Row]:
        """The System V objects the run's processes created (not a pid another process has taken since)."""
        uid = server_user().uid
        ours = {pid for pid, start in self.seen.items() if start_time(pid) in (None, start)}
        return [r for r in rows() if r.obj.uid == uid and r.ctime >= self.since
                and ((r.creator in ours) if r.obj.kind == "shm" else bool(last_pids(r) & ours))]

    def left(self) -> list[str]:
        """What of the run is still there: processes, folders (its sockets are in them), System V objects."""
        time.sleep(0.1)  # processes that were killed are reaped by init a moment later
        alive = [f"process {pid} {' '.join(_argv(pid))[:200]}" for pid, start in self.seen.items()
                 if start_time(pid) == start]
        folders = [f"folder {f}" for f in self.tmp.glob("leakcheck-*") if (o := owner_of(f)) and o.pid == self.proc.pid]
        return alive + folders + [str(r.obj) for r in self.objects()]

    def stop(self) -> None:
        """After a failed test: the run and whatever it left running stopped, its System V objects removed."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid, start in self.seen.items():
            if start_time(pid) == start:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        remove([r.obj for r in self.objects()])


def sweep(tmp: Path) -> list[str]:
    """`leakcheck sweep` with this TMPDIR: its lines."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")} | {"TMPDIR": str(tmp)}
    done = subprocess.run([sys.executable, "-m", "leakcheck.cli.main", "sweep"], env=env, capture_output=True,
                          text=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    """Starts runs (`leakcheck run ARGS`, or a Python command with its arguments) sharing one TMPDIR."""
    started: list[Run] = []
    with enterable_folder("leakcheck-test-tmp-") as tmp:

        def start(*args: str, command: str | None = None) -> Run:
            argv = ["-c", command, *args] if command else ["-m", "leakcheck.cli.main", "run", *args]
            started.append(Run(tmp, tmp_path / f"run{len(started)}.txt", argv))
            return started[-1]

        yield start
        for run in started:
            run.stop()


# --- which process to hit


def _with(pids: list[int], test: Callable[[int, list[str]], bool]) -> int | None:
    return next((pid for pid in pids if test(pid, _argv(pid))), None)


def pgpool_main(pids: list[int]) -> int | None:
    return _with(pids, lambda _, argv: any(a.endswith("/pgpool.conf") for a in argv))


def pgpool_child(pids: list[int]) -> int | None:
    """A pgpool-II child serving a client."""
    def serving(_: int, argv: list[str]) -> bool:
        title = title_of("\0".join(argv).encode())
        return bool(title) and not title.startswith(PGPOOL_AUX)
    return _with(pids, serving)


def odyssey(pids: list[int]) -> int | None:
    return _with(pids, lambda _, argv: any(program_in(a) == "odyssey" for a in argv))  # (its title, or its path)


def pgbouncer(pids: list[int]) -> int | None:
    return _with(pids, lambda _, argv: any(a.endswith("/pgbouncer.ini") for a in argv))


def postmaster(pids: list[int]) -> int | None:
    return _with(pids, lambda _, argv: argv[0].endswith("/postgres") and "-D" in argv)


def backend(pids: list[int]) -> int | None:
    """A PostgreSQL backend of a probe's client (its role is leakcheck_app)."""
    return _with(pids, lambda _, argv: argv[0].startswith("postgres: leakcheck_app "))


#: What to hit mid-run: (the pooler the run has, the process).
MID_RUN = {
    "pgpool-main": ("pgpool", pgpool_main),
    "pgpool-child": ("pgpool", pgpool_child),
    "odyssey": ("odyssey", odyssey),
    "pgbouncer": ("pgbouncer", pgbouncer),
    "postmaster": ("pgbouncer", postmaster),
    "postgres-backend": ("pgbouncer", backend),
}


#: A stopped backend is left out: it holds its probe for the probe's 30 s timeout (no watcher looks at backends);
#: what it leaves is test_a_stopped_backend_does_not_hold_its_postmasters_shutdown's.
@pytest.mark.parametrize(("target", "signum"), [
    (target, signum) for target in MID_RUN for signum in (signal.SIGKILL, signal.SIGSTOP)
    if (target, signum) != ("postgres-backend", signal.SIGSTOP)
], ids=lambda v: v.name if isinstance(v, signal.Signals) else v)
def test_a_server_process_killed_or_stopped_mid_run_is_an_error_and_the_run_leaves_nothing_of_it(
    target: str, signum: signal.Signals, runs: Callable[..., Run]
) -> None:
    pooler, find = MID_RUN[target]
    run = runs("--pg=16", POOLERS[pooler], *PROBES)
    pid = run.until(lambda pids: find(pids) if backend(pids) else None, f"{target} while a probe runs")
    os.kill(pid, signum)
    assert run.wait() in (0, 1), run.output()  # the run ended by itself, with its report
    # The run says so (a pgpool-II child killed is replaced, a backend killed restarts PostgreSQL: only their
    # clients fail; an Odyssey may be hit as its reset replaces it, before the probe's clients use the new one).
    if target in ("pgpool-main", "pgbouncer", "postmaster") or (target, signum) == ("pgpool-child", signal.SIGSTOP):
        said = "it is stopped (SIGSTOP)" if signum is signal.SIGSTOP else "ended by SIGKILL"
        assert said in run.output() and "ERROR" in run.output(), run.output()
    assert run.left() == []


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGSTOP], ids=lambda s: s.name)
@pytest.mark.parametrize("pooler", POOLERS)
def test_a_pooler_killed_or_stopped_while_it_starts_fails_its_cell_at_once_and_leaves_nothing(
    pooler: str, signum: signal.Signals, runs: Callable[..., Run]
) -> None:
    run = runs(str(int(signum)), pooler, "--pg=16", POOLERS[pooler], *PROBES, command=AT_SPAWN)
    assert run.wait() == 1, run.output()
    said = "it is stopped (SIGSTOP)" if signum is signal.SIGSTOP else "it was ended by SIGKILL"
    assert f"did not start: {said}" in run.output(), run.output()
    assert "not ready within" not in run.output()  # not its readiness bound: the stop is seen at once
    assert run.left() == []


def with_segment(pids: list[int]) -> int | None:
    """pgpool-II's main process, once it made its segment (and its semaphores, just before)."""
    main = pgpool_main(pids)
    return main if main is not None and any(r.creator == main for r in rows() if r.obj.kind == "shm") else None


#: A live run (its folders marked with its pid) with a pgpool-II up, until SIGTERM.
LIVE = textwrap.dedent("""
    import signal, time
    from leakcheck.model.pool_settings import PoolMode, PoolSettings
    from leakcheck.model.target import Pooler, PoolerKind
    from leakcheck.model.versions import parse_spec
    from leakcheck.provision.native import NativeBackend

    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with NativeBackend() as backend:
        pg = backend.resolve_pg(parse_spec("16", "--pg"))
        pooler = Pooler(PoolerKind.PGPOOL, backend.resolve_pooler(PoolerKind.PGPOOL, parse_spec("4.3", "-")))
        with backend.pooler(pg, pooler, PoolSettings(PoolMode.SESSION, 1)):
            time.sleep(60)
""")


def test_leakcheck_killed_while_pgpool_starts_leaves_nothing_once_swept_and_a_live_runs_pgpool_keeps_its_own(
    runs: Callable[..., Run],
) -> None:
    live = runs(command=LIVE)
    live_main = live.until(with_segment, "the live run's pgpool-II")
    dead = runs("--pg=16", POOLERS["pgpool"], *PROBES)
    dead.until(with_segment, "pgpool-II's segment")
    dead.kill()
    kept = {r.obj for r in live.objects()}
    assert {obj.kind for obj in kept} == {"shm", "sem"}

    said = sweep(dead.tmp)

    assert dead.left() == [], said
    assert [line for line in said if "semaphore set" in line and "shared memory segment" in line], said
    assert live.proc.poll() is None and start_time(live_main) is not None
    assert {r.obj for r in live.objects()} >= kept  # the live run's, untouched
    live.proc.send_signal(signal.SIGTERM)
    live.wait()
    assert live.left() == []


def test_leakcheck_killed_mid_run_leaves_nothing_of_any_pooler_once_swept(runs: Callable[..., Run]) -> None:
    run = runs("--pg=16", "--pooler=pgpool:4.3,odyssey:1.5,pgbouncer:1.24", *PROBES)
    run.until(lambda pids: pgpool_child(pids) if odyssey(pids) and pgbouncer(pids) else None,
              "a probe through pgpool-II while Odyssey and PgBouncer run")
    run.kill()
    sweep(run.tmp)
    assert run.left() == []


def test_a_stopped_backend_does_not_hold_its_postmasters_shutdown(user: ServerUser) -> None:
    install = resolve_pg(parse_spec("16", "--pg"), cache_root())
    with PgServer(install, cache_root(), user) as server:
        conn = psycopg.connect(server.endpoint().conninfo(), autocommit=True)
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        backend_pid, started = row[0], start_time(row[0])
        os.kill(backend_pid, signal.SIGSTOP)  # its own session: the postmaster's SIGCONT does not reach it
        conn.close()  # (not answered: the backend is stopped)
    # Its fast shutdown ended it (the backend got SIGCONT and then its SIGTERM), not SIGKILL after 10 s.
    assert "database system is shut down" in server.log_text(), server.log_text()[-2000:]
    assert start_time(backend_pid) != started
