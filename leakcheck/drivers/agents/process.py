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
import time
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
        self._answers: queue.Queue[bytes | None] = queue.Queue()
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
        for line in out:
            self._answers.put(line)
        self._answers.put(None)

    def _keep_stderr(self, err: IO[bytes]) -> None:
        for line in err:
            self._stderr.append(line.decode(errors="replace").rstrip())

    def _fault(self, what: str) -> AgentFault:
        self.stop()
        said = " | ".join(self._stderr)
        tail = f"; its stderr: {said}" if said else ""
        return AgentFault(f"the {self.driver} agent (pid {self.pid}) {what}{tail}")

    def request(self, op: str, timeout: float = REQUEST_TIMEOUT, **fields: Any) -> dict[str, Any]:
        """The answer to one request (`ok` false included); AgentFault when none comes in time."""
        if not self._lock.acquire(timeout=timeout):
            raise self._fault(f"was still busy with an earlier request after {timeout:.0f} s")
        try:
            self._next += 1
            wanted = self._next
            line = json.dumps({"id": wanted, "op": op, **fields}) + "\n"
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write(line.encode())
                self._proc.stdin.flush()
            except OSError as exc:
                raise self._fault(f"cannot be written to ({exc})") from exc
            deadline = time.monotonic() + timeout
            while True:
                try:
                    raw = self._answers.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise self._fault(f"gave no answer to {op!r} within {timeout:.0f} s") from None
                if raw is None:
                    self._answers.put(None)
                    raise self._fault(f"ended (exit status {self._proc.wait()}) before answering {op!r}")
                try:
                    answer = json.loads(raw)
                except ValueError:
                    raise self._fault(f"wrote a line that is not JSON: {raw[:200]!r}") from None
                if not isinstance(answer, dict) or not isinstance(answer.get("id"), int):
                    raise self._fault(f"wrote {raw[:200]!r}, not an answer")
                if answer["id"] == wanted:
                    return answer
                # an older request's answer (its caller gave up waiting): skipped
        finally:
            self._lock.release()

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
