"""One agent process and its protocol (docs/agent-protocol.md): a request line, its answer line.

Every read has a bound; an agent that does not answer in time, dies or writes something that is
not an answer is an AgentFault (a machine fault: the probe is an error, never a verdict) and is
stopped, so a later probe gets a fresh one. Its stderr is kept (the last lines) for those messages.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import pwd
import queue
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

from leakcheck.model.errors import LeakcheckError
from leakcheck.provision.host.system import ServerUser

PROTOCOL = 1
#: Seconds an agent may take to start and answer `hello` (a JVM is the slowest).
HELLO_TIMEOUT = 30.0
#: Seconds one request may take (a probe as a whole has runner.PROBE_TIMEOUT).
REQUEST_TIMEOUT = 30.0
#: Seconds an agent has to end after `exit` / end of stdin before it is killed.
STOP_TIMEOUT = 5.0


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


class AgentProcess:
    """A started agent: `request()` sends one request and waits (bounded) for its answer."""

    def __init__(self, driver: str, argv: list[str], folder: Path, *, user: ServerUser | None = None,
                 hello_timeout: float = HELLO_TIMEOUT, named: bool = True) -> None:
        """`user`: run it as that user (a team's agent when leakcheck is root); `named`: its hello
        must name `driver` (a team's agent names itself)."""
        self.driver = driver
        self._lock = threading.Lock()
        self._route = threading.Lock()  # guards the writes to stdin, _next and _waiting
        self._waiting: dict[int, queue.Queue[dict[str, Any] | None]] = {}
        self._broken: str | None = None
        self._ended = False
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._next = 0
        uid, gid, groups = user.popen_ids() if user is not None else (None, None, None)
        env = None if user is None or user.is_self else {**os.environ, "HOME": _home(user), "USER": user.name,
                                                         "LOGNAME": user.name}
        try:
            self._proc = subprocess.Popen(argv, cwd=folder, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, user=uid, group=gid, extra_groups=groups,
                                          env=env)
        except OSError as exc:
            raise AgentFault(f"the {driver} agent could not be started ({' '.join(argv)}): {exc}") from exc
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._readers = (threading.Thread(target=self._read, args=(self._proc.stdout,), daemon=True),
                         threading.Thread(target=self._keep_stderr, args=(self._proc.stderr,), daemon=True))
        for reader in self._readers:
            reader.start()
        self.hello = self.request("hello", timeout=hello_timeout)
        if self.hello.get("protocol") != PROTOCOL or (named and self.hello.get("driver") != driver):
            self.stop()
            raise AgentFault(f"the {driver} agent said {self.hello!r}; leakcheck speaks protocol {PROTOCOL}")

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def _read(self, out: IO[bytes]) -> None:
        """Hands each answer to the request of its id; answers to requests given up on are skipped. A
        line that is not an answer, or the end of stdout, ends every wait (a fault)."""
        for raw in out:
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
        with self._route:
            self._ended = True
            for waiting in self._waiting.values():
                waiting.put(None)

    def _keep_stderr(self, err: IO[bytes]) -> None:
        for line in err:
            self._stderr.append(line.decode(errors="replace").rstrip())

    def _fault(self, what: str) -> AgentFault:
        self.stop()
        said = " | ".join(self._stderr)
        tail = f"; its stderr: {said}" if said else ""
        return AgentFault(f"the {self.driver} agent (pid {self.pid}) {what}{tail}")

    def request(self, op: str, timeout: float = REQUEST_TIMEOUT, **fields: Any) -> dict[str, Any]:
        """The answer to one request (`ok` false included); AgentFault when none comes in time.
        Requests wait for the one before (the agent answers in order), except `cancel`, which is
        sent while an earlier request runs and may be answered first (answers are matched by id)."""
        if op == "cancel":
            return self._exchange(op, timeout, fields)
        if not self._lock.acquire(timeout=timeout):
            raise self._fault(f"was still busy with an earlier request after {timeout:.0f} s")
        try:
            return self._exchange(op, timeout, fields)
        finally:
            self._lock.release()

    def _exchange(self, op: str, timeout: float, fields: dict[str, Any]) -> dict[str, Any]:
        failed: str | None = None
        with self._route:  # (a fault stops the agent, which waits for the reader: raised outside)
            self._next += 1
            wanted = self._next
            mine: queue.Queue[dict[str, Any] | None] = queue.Queue()
            if self._ended:
                failed = self._broken or f"ended before {op!r} was sent"
            else:
                self._waiting[wanted] = mine
                try:
                    assert self._proc.stdin is not None
                    self._proc.stdin.write((json.dumps({"id": wanted, "op": op, **fields}) + "\n").encode())
                    self._proc.stdin.flush()
                except OSError as exc:
                    self._waiting.pop(wanted, None)
                    failed = f"cannot be written to ({exc})"
        if failed is not None:
            raise self._fault(failed)
        try:
            try:
                answer = mine.get(timeout=timeout)
            except queue.Empty:
                raise self._fault(f"gave no answer to {op!r} within {timeout:.0f} s") from None
            if answer is None:
                raise self._fault(self._broken or f"ended (exit status {self._proc.wait()}) before answering {op!r}")
            return answer
        finally:
            with self._route:
                self._waiting.pop(wanted, None)

    def stop(self) -> None:
        """Close its stdin (it ends), then kill it if it has not ended within STOP_TIMEOUT."""
        if self._proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self._proc.stdin is not None
                self._proc.stdin.close()
            try:
                self._proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(STOP_TIMEOUT)
        for reader in self._readers:
            if reader is not threading.current_thread():
                reader.join(STOP_TIMEOUT)
        for pipe in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
