"""One agent process and its protocol (docs/agent-protocol.md): a request line, its answer line.

Every read has a bound; an agent that does not answer in time, dies or writes something that is
not an answer is an AgentFault (a machine fault: the probe is an error, never a verdict) and is
stopped, so a later probe gets a fresh one. Its stderr is kept (the last lines) for those messages.

An agent and everything it starts never outlive it: each one is the leader of a session (and process
group) of its own and carries a tag in its environment (provision/host/tagged.py). `stop()` closes its
stdin, then signals the group (SIGTERM, then SIGKILL), then SIGKILLs what is left of the group and
every process still carrying its tag (a daemon that left the group), each wait bounded. Its pipes are
read with poll() and raw reads, so a child that keeps them open never blocks a stop, and an answer
line has a size bound (MAX_LINE). `stop_every()` stops every agent of this process at once (the end
of a run, Ctrl-C, the interpreter's exit); a run killed with SIGKILL leaves agents that ignore the
end of their input: the next run's sweep ends them (tagged.sweep_tagged).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import itertools
import json
import logging
import os
import pwd
import queue
import select
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from leakcheck.drivers.agents.preload import Forked, Preloader, PreloadFailed
from leakcheck.model.errors import LeakcheckError
from leakcheck.provision.host import tagged
from leakcheck.provision.host.system import ServerUser

log = logging.getLogger(__name__)

PROTOCOL = 1
#: Seconds an agent may take to start and answer `hello` (a JVM is the slowest).
HELLO_TIMEOUT = 30.0
#: Seconds one request may take (a probe as a whole has runner.PROBE_TIMEOUT).
REQUEST_TIMEOUT = 30.0
#: Seconds an agent has to end after `exit` / end of stdin before its process group gets SIGTERM.
STOP_TIMEOUT = 5.0
#: Seconds after that SIGTERM before the group gets SIGKILL.
TERM_TIMEOUT = 1.0
#: The most an agent's hello may ask for on top of STOP_TIMEOUT to end (`ends_within`: pgx's agents say 25, their
#: close's bound and then up to 15 s for a connection pgconn still closes: a cancel it sends, docs/agent-protocol.md).
ENDS_WITHIN_MAX = 30.0
#: The longest answer line (bytes, without its newline): a longer one is an AgentFault, not read whole.
MAX_LINE = 16 * 2**20
#: The longest stderr line kept (bytes); the rest of a longer one is dropped.
STDERR_LINE = 1000
#: The ops sent while an earlier request runs, read by the agent mid-call (docs/agent-protocol.md).
BESIDE = ("cancel", "go")
#: Seconds between two looks at whether a reader or a writer should give up (a stop).
_LOOK = 0.25
#: The longest stop() takes at its default grace: STOP_TIMEOUT, TERM_TIMEOUT after SIGTERM, TERM_TIMEOUT for the
#: reaping after SIGKILL, and its two readers' joins (2 * _LOOK each).
STOP_BOUND = STOP_TIMEOUT + 2 * TERM_TIMEOUT + 2 * 2 * _LOOK
#: What a team's agent run as another user gets of leakcheck's environment (besides that user's HOME,
#: USER and LOGNAME, and the tag): the rest (root's tokens, keys, proxies) is not a client's business.
PASSED = ("PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR")
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


class AgentFault(LeakcheckError):
    """An agent process failed as a program (not a statement failing): died, hung, or broke the protocol."""


class AgentRefused(AgentFault):
    """An agent answered a request with the class `usage` or `unsupported` (it stays usable)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def _home(user: ServerUser) -> str:
    try:
        return pwd.getpwuid(user.uid).pw_dir
    except KeyError:
        return "/"


def environment(user: ServerUser | None, tag: str) -> dict[str, str]:
    """An agent's environment: leakcheck's own when it runs as the invoking user; as another user only
    PASSED and LC_* of it, with that user's HOME, USER and LOGNAME. Both with its tag."""
    if user is None or user.is_self:
        return {**os.environ, tagged.VARIABLE: tag}
    kept = {k: v for k, v in os.environ.items() if k in PASSED or k.startswith("LC_")}
    return {"PATH": _DEFAULT_PATH, **kept, "HOME": _home(user), "USER": user.name, "LOGNAME": user.name,
            tagged.VARIABLE: tag}


def _hello_problem(hello: dict[str, Any], driver: str, named: bool) -> str | None:
    """What in a `hello` answer protocol 1 does not allow, or None."""
    protocol = hello.get("protocol")
    if type(protocol) is not int or protocol != PROTOCOL:  # true and 1.0 equal 1 in Python, not in the protocol
        return f"said protocol {json.dumps(protocol)}; leakcheck speaks protocol {PROTOCOL} (the integer)"
    if hello.get("ok") is not True:
        return f"answered hello without \"ok\": true: {json.dumps(hello)[:200]}"
    if not isinstance(hello.get("driver"), str) or (named and hello["driver"] != driver):
        return f"named the driver {json.dumps(hello.get('driver'))}" + (f", not {driver!r}" if named else "")
    for key in ("release", "runtime", "no_cancel", "no_notifications", "statement_names"):
        if key in hello and not isinstance(hello[key], str):
            return f"gave {key} {json.dumps(hello[key])[:80]}, not text"
    ops = hello.get("ops", [])
    if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops):
        return f"gave ops {json.dumps(ops)[:80]}, not a list of op names"
    ends = hello.get("ends_within", 0)
    if type(ends) not in (int, float) or not 0 <= ends <= ENDS_WITHIN_MAX:
        return f"gave ends_within {json.dumps(ends)[:80]}, not seconds from 0 to {ENDS_WITHIN_MAX:g}"
    return None  # (`settings`: team.py checks them)


def _lines(fd: int, limit: int, closing: threading.Event) -> Iterator[tuple[bytes, bool]]:
    """The lines `fd` gives (without their newline) until its end or `closing` (looked at every _LOOK
    seconds, so a pipe a left-over child holds open never holds a stop). A line longer than `limit`
    bytes comes as its first `limit` bytes with False (never read whole), and its rest is skipped."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    held = bytearray()
    skipping = False
    while not closing.is_set():
        if not poller.poll(int(_LOOK * 1000)):
            continue
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:
            return
        if not chunk:
            return
        held += chunk
        while (end := held.find(b"\n")) >= 0:
            line = bytes(held[:end])
            del held[:end + 1]
            if skipping:
                skipping = False
            elif len(line) > limit:
                yield line[:limit], False
            else:
                yield line, True
        if len(held) > limit and not skipping:
            yield bytes(held[:limit]), False
            skipping = True
        if skipping:
            held.clear()


_serials = itertools.count(1)
_live: set[AgentProcess] = set()
_live_lock = threading.Lock()


class AgentProcess:
    """A started agent: `request()` sends one request and waits (bounded) for its answer."""

    def __init__(self, driver: str, argv: list[str], folder: Path, *, user: ServerUser | None = None,
                 hello_timeout: float = HELLO_TIMEOUT, named: bool = True, about: str | None = None,
                 preload: list[str] | None = None) -> None:
        """`user`: run it as that user (a team's agent when leakcheck is root); `named`: its hello
        must name `driver` (a team's agent names itself); `about`: what messages call it (default
        "the DRIVER agent"); `preload`: the command of the driver's preloader (preload.py): the agent
        is a fork of the run's one (started with its first agent), or started on its own when that
        preloader fails."""
        self.driver = driver
        self.about = about or f"the {driver} agent"
        self._lock = threading.Lock()  # one request at a time (BESIDE aside)
        self._route = threading.Lock()  # guards the writes to stdin, _next and _waiting
        self._stopping = threading.Lock()
        self._closing = threading.Event()  # set by stop(): readers and writers give up
        self._stopped = False
        self._waiting: dict[int, queue.Queue[dict[str, Any] | None]] = {}
        self._broken: str | None = None
        self._ended = False
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._next = 0
        self._serial = next(_serials)
        self._run = tagged.run_tag()
        uid, gid, groups = user.popen_ids() if user is not None else (None, None, None)
        _sweep_once()
        forked = _forked(preload, folder, tagged.tag(self._serial), hello_timeout) if preload and user is None else None
        try:
            # A session of its own: it and its children form a group that stop() signals as one, and no
            # terminal's Ctrl-C reaches them (leakcheck stops them itself, in order).
            self._proc: subprocess.Popen[bytes] | Forked = forked or subprocess.Popen(
                argv, cwd=folder, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, user=uid,
                group=gid, extra_groups=groups, env=environment(user, tagged.tag(self._serial)),
                start_new_session=True)
        except OSError as exc:
            raise AgentFault(f"{self.about} could not be started ({' '.join(argv)}): {exc}") from exc
        with _live_lock:
            _live.add(self)
        try:  # not reaped yet: the pid is its own (a fork's: its preloader's pidfd)
            self._pidfd: int | None = None if forked else os.pidfd_open(self._proc.pid)
        except OSError:  # a kernel before 5.3: _ended_within looks every 20 ms instead
            self._pidfd = None
        assert self._proc.stdin is not None and self._proc.stdout is not None and self._proc.stderr is not None
        os.set_blocking(self._proc.stdin.fileno(), False)  # a write waits in poll(), bounded (_write)
        self._readers = (threading.Thread(target=self._read, daemon=True, name=f"agent-{self.pid}-stdout"),
                         threading.Thread(target=self._keep_stderr, daemon=True, name=f"agent-{self.pid}-stderr"))
        for reader in self._readers:
            reader.start()
        try:
            self.hello = self.request("hello", timeout=hello_timeout)
        except AgentFault:
            raise  # stopped already
        except BaseException:  # Ctrl-C while it starts: stopped all the same, without waiting for it
            self.stop(grace=0)
            raise
        problem = _hello_problem(self.hello, driver, named)
        if problem is not None:
            raise self._fault(problem)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def ends_within(self) -> float:
        """Seconds its hello said it may take to end beyond its close (0 unless it said: `ends_within`)."""
        return float(getattr(self, "hello", {}).get("ends_within", 0))  # (none yet: stopped while it starts)

    @property
    def alive(self) -> bool:
        return not self._stopped and not self._ended_within(0)

    @property
    def busy(self) -> bool:
        """Whether a request is still in flight: a later one waits for its answer (the agent answers in order)."""
        return self._lock.locked()

    def idle_within(self, seconds: float) -> bool:
        """Whether the request in flight (if any) got its answer within `seconds`: the agent is then free for the
        next one."""
        if not self._lock.acquire(timeout=seconds):
            return False
        self._lock.release()
        return True

    def _ended_within(self, seconds: float) -> bool:
        """Whether the agent ended within `seconds` (its pidfd turns readable at its end). It is not reaped
        here: its pid, the id of its group, stays its own until stop() has signalled the group (a reaped
        pid may be reused)."""
        if isinstance(self._proc, Forked):  # not our child: its preloader's
            return self._proc.ended_within(seconds)
        until = time.monotonic() + seconds
        while True:
            try:
                if os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return True
            except ChildProcessError:  # already reaped
                return True
            left = until - time.monotonic()
            if left <= 0:
                return False
            if self._pidfd is not None:
                waiting = select.poll()
                waiting.register(self._pidfd, select.POLLIN)
                waiting.poll(int(left * 1000) + 1)
            else:
                time.sleep(min(0.02, left))

    def _signal_group(self, signum: signal.Signals) -> None:
        if isinstance(self._proc, Forked):  # not our child: its pidfd, never a pid init may have freed
            self._proc.signal(signum)  # (what it starts carries its own tag: kill_tagged ends that)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def _read(self) -> None:
        """Hands each answer to the request of its id; answers to requests given up on are skipped. A
        line that is not an answer, or is longer than MAX_LINE, or the end of stdout, ends every wait."""
        assert self._proc.stdout is not None
        try:
            for raw, whole in _lines(self._proc.stdout.fileno(), MAX_LINE, self._closing):
                if not whole:
                    self._broken = f"wrote an answer line longer than {MAX_LINE // 2**20} MiB (the protocol's bound)"
                    break
                try:
                    answer = json.loads(raw)
                except ValueError:
                    answer = None
                if not isinstance(answer, dict) or not isinstance(answer.get("id"), int):
                    self._broken = f"wrote {raw[:200]!r}, not an answer"
                    break
                with self._route:
                    waiting = self._waiting.get(answer["id"])
                if waiting is not None:
                    waiting.put(answer)
        finally:
            with self._route:
                self._ended = True
                for waiting in self._waiting.values():
                    waiting.put(None)
            self._proc.stdout.close()  # only this thread reads it

    def _keep_stderr(self) -> None:
        assert self._proc.stderr is not None
        try:
            for line, whole in _lines(self._proc.stderr.fileno(), STDERR_LINE, self._closing):
                self._stderr.append(line.decode(errors="replace").rstrip() + ("" if whole else " ..."))
        finally:
            self._proc.stderr.close()

    def _fault(self, what: str, by: str = "") -> AgentFault:
        self.stop()
        said = " | ".join(self._stderr)
        tail = f"; its stderr: {said}" if said else ""
        asked = f" (asked by client {by})" if by else ""
        return AgentFault(f"{self.about} (pid {self.pid}) {what}{asked}{tail}")

    def request(self, op: str, timeout: float = REQUEST_TIMEOUT, by: str = "", **fields: Any) -> dict[str, Any]:
        """The answer to one request (`ok` false included); AgentFault when none comes in time (`by`:
        the client that asks, A, B or C, for that message). Requests wait for the one before (the agent
        answers in order), except `cancel` and `go`, which are sent while an earlier request runs and may be
        answered first (answers are matched by id)."""
        if op in BESIDE:
            return self._exchange(op, timeout, by, fields)
        if not self._lock.acquire(timeout=timeout):
            raise self._fault(f"was still busy with an earlier request when {op!r} waited {timeout:.0f} s", by)
        try:
            return self._exchange(op, timeout, by, fields)
        finally:
            self._lock.release()

    def _exchange(self, op: str, timeout: float, by: str, fields: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        failed: str | None = None
        with self._route:  # (a fault stops the agent, which waits for the reader: raised outside)
            self._next += 1
            wanted = self._next
            mine: queue.Queue[dict[str, Any] | None] = queue.Queue()
            if self._ended:
                failed = self._broken or f"had ended before {op!r} was sent"
            else:
                self._waiting[wanted] = mine
                failed = self._write((json.dumps({"id": wanted, "op": op, **fields}) + "\n").encode(), deadline)
                if failed is not None:
                    self._waiting.pop(wanted, None)
        if failed is not None:
            raise self._fault(failed, by)
        try:
            try:
                answer = mine.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise self._fault(f"gave no answer to {op!r} within {timeout:.0f} s", by) from None
            if answer is None:
                raise self._fault(self._broken or self._ending(op), by)
            return answer
        finally:
            with self._route:
                self._waiting.pop(wanted, None)

    def _ending(self, op: str) -> str:
        """How it ended before answering `op` (it is stopped first: its exit status is known then)."""
        stopped = self._closing.is_set()
        self.stop()
        if stopped:
            return f"was stopped before answering {op!r}"
        code = self._proc.returncode
        how = "" if code is None else f" (exit status {code})" if code >= 0 else f" (killed by {_signal_name(-code)})"
        return f"ended{how} before answering {op!r}"

    def _write(self, data: bytes, deadline: float) -> str | None:
        """Writes `data` to its stdin by the deadline (an agent that reads no input fills the pipe); what
        went wrong, or None."""
        assert self._proc.stdin is not None
        fd = self._proc.stdin.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        while data:
            left = deadline - time.monotonic()
            if self._closing.is_set():
                return "was being stopped"
            if left <= 0:
                return "read no input (its stdin stayed full) until the request's time was up"
            if not poller.poll(int(min(_LOOK, left) * 1000) + 1):
                continue
            try:
                data = data[os.write(fd, data):]
            except BlockingIOError:
                continue
            except OSError as exc:
                return f"cannot be written to ({exc})"
        return None

    def stop(self, grace: float = STOP_TIMEOUT) -> None:
        """End it and everything it started: its stdin closed (it ends), after `grace` seconds SIGTERM to
        its process group, after TERM_TIMEOUT more SIGKILL; then SIGKILL to what is left of the group and
        to every process still carrying its tag. Bounded, and never waits on its pipes."""
        with self._stopping:
            if self._stopped:
                return
            self._closing.set()
            with self._route, contextlib.suppress(OSError):  # (a writer gives up within _LOOK seconds)
                assert self._proc.stdin is not None
                self._proc.stdin.close()
            if not self._ended_within(grace):
                self._signal_group(signal.SIGTERM)
                if not self._ended_within(TERM_TIMEOUT):
                    self._signal_group(signal.SIGKILL)
            self._signal_group(signal.SIGKILL)  # what is left of the group (helpers of an agent that ended)
            tagged.kill_tagged(self._run, self._serial)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(TERM_TIMEOUT)  # reaped (a SIGKILLed process ends at once)
            if isinstance(self._proc, Forked):
                self._proc.close()
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
            self._stopped = True
            with _live_lock:
                _live.discard(self)
        for reader in self._readers:
            if reader is not threading.current_thread():
                reader.join(2 * _LOOK)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def stop_together(agents: Iterable[AgentProcess], grace: float = STOP_TIMEOUT) -> None:
    """Stop `agents` at the same time (each in a thread of its own; a stop is bounded), and wait for them. An
    agent whose hello said it may take longer to end (`ends_within`: pgx's, which first waits for a cancel its driver
    still sends) gets that much more grace before its SIGTERM, only in a full stop (grace STOP_TIMEOUT, not a hurried
    one: Ctrl-C, the exit's clean-up). Cut short, it would end the driver's cancel connection while PgBouncer 1.18.0
    still forwards the request, which the pool's next reset then turns into PgBouncer's exit (pgbouncer#801)."""
    threads = [threading.Thread(target=agent.stop, name=f"agent-{agent.pid}-stop",
                                args=(grace + agent.ends_within if grace >= STOP_TIMEOUT else grace,))
               for agent in agents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def stop_every(grace: float = STOP_TIMEOUT) -> None:
    """Stop every agent this process started and has not stopped, together, then SIGKILL anything still
    carrying this run's tag (the end of a run, Ctrl-C, the interpreter's exit)."""
    with _live_lock:
        agents = list(_live)
    stop_together(agents, grace)
    with _preload_lock:
        preloaders = [preloader for preloader in _preloaders.values() if preloader is not None]
        _preloaders.clear()
    for preloader in preloaders:
        preloader.stop(min(grace, TERM_TIMEOUT))
    tagged.kill_tagged(tagged.run_tag())


_preloaders: dict[tuple[str, ...], Preloader | None] = {}  # None: it failed, agents start on their own
_preload_lock = threading.Lock()


def _forked(preload: list[str], folder: Path, tag: str, boot_timeout: float) -> Forked | None:
    """A fork of the run's preloader of that command (started now if it is the first), or None when the
    preloader failed (it is stopped, and this run's later agents of the driver start on their own)."""
    key = (*preload, str(folder))
    with _preload_lock:
        if key not in _preloaders:
            try:
                _preloaders[key] = Preloader(preload, folder, next(_serials), boot_timeout)
            except PreloadFailed as exc:
                log.warning(f"the preloader {' '.join(preload)} {exc}: its agents start on their own")
                _preloaders[key] = None
        preloader = _preloaders[key]
    if preloader is None:
        return None
    try:
        return preloader.fork(tag)
    except PreloadFailed as exc:
        with _preload_lock:
            if _preloaders.get(key) is preloader:
                _preloaders[key] = None
        log.warning(f"the preloader {' '.join(preload)} (pid {preloader.proc.pid}) {exc}: its agents start "
                    "on their own")
        preloader.stop(0, forks=False)  # its forks serving other lanes end with their own stop
        return None


atexit.register(stop_every, TERM_TIMEOUT)

_swept = threading.Lock()
_sweep_done: list[bool] = []


def _sweep_once() -> None:
    """Before this process's first agent: what killed runs' agents left (tagged.sweep_tagged)."""
    with _swept:
        if not _sweep_done:
            _sweep_done.append(True)
            tagged.sweep_tagged()
