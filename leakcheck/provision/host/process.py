"""One way to run a server program (PostgreSQL and the poolers), and one readiness loop.

A `ServerProcess` starts as the unprivileged server user, in its own session (Ctrl-C reaches
leakcheck, which stops it), with PDEATHSIG (it dies with leakcheck), output to a log file;
`stop()` sends the program's shutdown signal (and SIGCONT: a stopped program acts on it), then
SIGKILL to its process group after its stop timeout, and is safe at any point. `wait_until` is the
one readiness loop, for processes and containers alike: a server that exits or is stopped (SIGSTOP)
while it gets ready fails its start at once.

A server whose main process forks others (PostgreSQL, pgpool-II: `forks=True`) is written into its
folder's ledger as it starts (ledger.py). When its main process ends without its own clean shutdown
(killed, crashed, or stopped and then killed by stop()), what that shutdown would have removed is
removed as soon as leakcheck sees the end: the server processes still running from its folder
(pgpool-II's children outlive their main process) and the System V objects its processes created
(sysv.py), never another's.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from leakcheck.model.errors import StartError
from leakcheck.provision.host import forks, ledger, sysv
from leakcheck.provision.host.owner import start_time, started_at
from leakcheck.provision.host.proc_sockets import children_of
from leakcheck.provision.host.strays import servers_in, stop_servers_in
from leakcheck.provision.host.system import PortClash, ServerUser, die_with_parent

#: How a server that lost a race for its port says so; such a start is retried on another port.
PORT_TAKEN = "Address already in use"


def wait_until(
    what: str, ready: Callable[[], str | None], gone: Callable[[], str | None], timeout: float,
    log: Callable[[], str], hint: str = "", poll: float = 0.02, late: str = "",
) -> None:
    """Poll `ready` (None when ready, else the last reason) until it is, the server is `gone` (a
    reason), or `timeout` passes; the last two raise StartError (PortClash for a lost port) with the log.
    `late` is said only when the time ran out (e.g. "Is the machine overloaded?")."""
    deadline = time.monotonic() + timeout
    while True:
        died = gone()
        if died is not None:
            text = log()
            kind = PortClash if PORT_TAKEN in text else StartError
            raise kind.with_log(what, died, text, hint)
        last = ready()
        if last is None:
            return
        if time.monotonic() > deadline:
            raise StartError.with_log(what, f"not ready within {timeout:.0f} s ({last})", log(),
                                      " ".join(h for h in (hint, late) if h))
        time.sleep(poll)


def exit_reason(code: int) -> str:
    """'it exited with code 1', or 'it was ended by SIGABRT' for a negative (signal) code."""
    if code < 0:
        try:
            return f"it was ended by {signal.Signals(-code).name}"
        except ValueError:
            return f"it was ended by signal {-code}"
    return f"it exited with code {code}"


def stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP, SIGTSTP: state T in /proc/PID/stat; t: stopped by a tracer)."""
    try:  # the runner's watcher asks every 0.1 s per lane: a plain read, no pathlib object
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat.rpartition(b")")[2].split()[:1] in ([b"T"], [b"t"])


#: How a stopped server is described (it runs, but cannot answer until it gets SIGCONT).
STOPPED = "it is stopped (SIGSTOP): it cannot answer"


class ServerProcess:
    """One server program: started once, stopped once, its log kept after it ends."""

    def __init__(
        self, what: str, argv: Sequence[str], user: ServerUser, cwd: Path, log: Path, *,
        env: Mapping[str, str] | None = None, stop_signal: signal.Signals = signal.SIGTERM,
        stop_timeout: float = 5.0, death_signal: signal.Signals = signal.SIGKILL, forks: bool = False,
    ) -> None:
        self.what, self.argv, self.user, self.cwd, self.log = what, tuple(argv), user, cwd, log
        self.env = dict(env) if env is not None else None
        self.stop_signal, self.stop_timeout = stop_signal, stop_timeout
        self.death_signal = death_signal  # what it gets when leakcheck dies (PDEATHSIG)
        self.forks = forks  # its main process forks others, which may outlive it (see the module's doc)
        self._proc: subprocess.Popen[bytes] | None = None
        self._spawning = False  # a signal inside Popen can leave a server we have no handle on
        self._log_start = 0
        self._started: ledger.Started | None = None  # its main process, once spawned (forks=True)
        self._clearing = threading.Lock()  # the watcher's thread and the main thread may both see the end

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self, ready: Callable[[], str | None], timeout: float, hint: str = "", late: str = "") -> None:
        """Start it and wait until `ready()` says so (see wait_until)."""
        self.spawn()
        self.wait(ready, timeout, hint, late)

    def spawn(self) -> None:
        """Start it, without waiting (several can then get ready at once). From the main thread, or a
        thread that lives as long as the server (PDEATHSIG acts when the thread that forked it ends)."""
        uid, gid, groups = self.user.popen_ids()
        self._spawning = True
        with open(self.log, "ab") as out, forks.held():  # a stop signal acts once Popen has returned
            self._log_start = out.tell()
            self._proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=self.cwd,
                env=self.env, user=uid, group=gid, extra_groups=groups,
                preexec_fn=functools.partial(die_with_parent, self.death_signal),  # noqa: PLW1509 (see ServerProcess.spawn)
                start_new_session=True,
            )
            if self.forks:  # before it can create anything: a run killed now is swept by this line
                start = start_time(self._proc.pid)
                if start is not None:
                    self._started = ledger.Started(self._proc.pid, start)
                    ledger.record_process(self.cwd, self._proc.pid, start)
        self._spawning = False

    def wait(self, ready: Callable[[], str | None], timeout: float, hint: str = "", late: str = "") -> None:
        """Until `ready()` says so; StartError (PortClash for a lost port) when it exits or times out."""
        wait_until(self.what, ready, self.ended, timeout, self.recent_log, hint, late=late)

    def exit_code(self) -> int | None:
        """Its exit code once it ended (negative: the signal that ended it), else None."""
        return self._proc.poll() if self._proc is not None else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def ended(self) -> str | None:
        """How it ended ('it was ended by SIGKILL'), or that it is stopped (STOPPED), while it should serve;
        None while it runs (or before it started). Cheap: a waitpid and one read of /proc."""
        proc = self._proc
        if proc is None:
            return None
        code = proc.poll()
        if code is not None:
            self.clear_leftovers()
            return exit_reason(code)
        return STOPPED if stopped(proc.pid) else None

    def record_objects(self) -> None:
        """Write the System V objects its processes (main and children) created so far into its folder's
        ledger: a child that created one may be gone when they are looked for (forks=True)."""
        started = self._started
        if started is None or self.exit_code() is not None:
            return
        pids = {started.pid, *children_of(started.pid)}
        ledger.record_objects(self.cwd, sysv.created_by(pids, self.user.uid, started_at(started.start)))

    def clear_leftovers(self) -> None:
        """Once its main process ended without its own clean shutdown (forks=True): stop the server
        processes still running from its folder, then remove the System V objects its processes created
        (found by creator, and those its folder's ledger names). Once; safe from any thread."""
        started = self._started
        if started is None:
            return
        with self._clearing:
            if self._started is None:
                return
            self._started = None
            stragglers = stop_servers_in(self.cwd)
            _, recorded = ledger.read(self.cwd)
            mine = sysv.created_by({started.pid, *stragglers}, self.user.uid, started_at(started.start))
            sysv.remove([*recorded, *mine])

    def stop(self, sig: signal.Signals | None = None) -> None:
        """Its shutdown signal (or `sig`) and SIGCONT, up to stop_timeout, then SIGKILL to its process group."""
        proc, self._proc = self._proc, None
        if proc is None:
            if self._spawning:  # Popen was interrupted after the exec: find it by its folder
                self._spawning = False
                stop_servers_in(self.cwd)
            return
        clean = False  # it shut down by itself, on its shutdown signal: it removed what it made
        try:
            if proc.poll() is None:
                proc.send_signal(sig or self.stop_signal)
                with contextlib.suppress(ProcessLookupError):  # one stopped (SIGSTOP) acts on it only now
                    os.killpg(proc.pid, signal.SIGCONT)
                if self.forks:  # PostgreSQL's backends lead sessions of their own: one stopped holds its shutdown
                    for pid in servers_in(self.cwd):
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(pid, signal.SIGCONT)
                clean = proc.wait(self.stop_timeout) == 0 and sig is None
        except subprocess.TimeoutExpired:
            pass
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if not clean:
                self.clear_leftovers()

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def recent_log(self) -> str:
        """What it logged since this start (a log file may hold earlier starts)."""
        return self.log_text()[self._log_start :]
