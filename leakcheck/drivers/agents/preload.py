"""A preloader: one booted process of an agent that forks the run's agents of that driver
(docs/agent-protocol.md, "Preloaded agents"), as Puma or Unicorn fork a Rails application's workers and
gunicorn --preload a Python application's.

A driver whose spec has `preload` gets one per run, started with the first agent: the agent's imports are
loaded once (ActiveRecord's Rails, ActiveRecord and ruby-pg take a quarter of a second of CPU, Django's or
SQLAlchemy's with psycopg 0.3-0.4 s), and each agent is still a process of its own (a fork: its own session
and process group, its own connections). The preloaders (activerecord/preload.rb, django/preload.py) speak
one protocol, read here. It is told what to do on a SOCK_SEQPACKET socket leakcheck keeps the other end
of: a fork request carries the new agent's stdin, stdout and stderr (SCM_RIGHTS) and its tag, and is
answered with its pid once it leads its own session; a reap request collects a child's exit status (a
child stays a zombie until then, so the pid stop() signals stays its own). The end of that socket
(leakcheck ended) ends the preloader; it carries the run's tag, so the end of a run and the next run's
sweep end it and every fork of it (a fork's /proc environ is its parent's: the preloader's tag) as they
end agents.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import IO

from leakcheck.provision.host import tagged
from leakcheck.provision.host.proc_sockets import parent_of

#: Seconds a preloader request may take (the first waits for its boot: hello's bound, process.HELLO_TIMEOUT).
REQUEST_TIMEOUT = 10.0
#: Seconds a reap request may take: it comes while an agent is stopped, whose stop is bounded.
REAP_TIMEOUT = 1.0


class PreloadFailed(Exception):
    """The preloader could not fork an agent: the agent is started on its own instead."""


class Preloader:
    """A running preloader: `fork()` makes one agent process of it."""

    def __init__(self, argv: list[str], folder: Path, serial: int, boot_timeout: float) -> None:
        """`argv`: its command, "{fd}" the number of its socket's end."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._link = ours
        self._lock = threading.Lock()
        self._stopped = False
        #: why it is asked nothing more: an answer it owes may still come, and would answer the next request
        self._broken: str | None = None
        self._stopping = threading.Lock()
        self._boot_timeout = boot_timeout  # the first request's bound: it waits for the requires
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (kept until stop())
        try:
            command = [part.replace("{fd}", str(theirs.fileno())) for part in argv]
            self.proc = subprocess.Popen(command, cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=self._stderr, pass_fds=(theirs.fileno(),), start_new_session=True,
                                         env={**os.environ, tagged.VARIABLE: tagged.tag(serial)})
        except OSError as exc:
            ours.close()
            self._stderr.close()
            raise PreloadFailed(f"could not be started: {exc}") from exc
        finally:
            theirs.close()
        self.serial = serial

    def _ask(self, message: bytes, fds: list[int] | None = None, bound: float | None = None) -> str:
        """Its answer to one request, within `bound` seconds (default REQUEST_TIMEOUT, the first request its
        boot's too). PreloadFailed when none comes in time or it ended: it is then asked nothing more, for
        an answer that comes late would be read as the next request's."""
        # (the request before may wait for its boot; each is bounded)
        if not self._lock.acquire(timeout=bound if bound is not None else self._boot_timeout + REQUEST_TIMEOUT):
            raise PreloadFailed(f"was still busy with an earlier request after {self._boot_timeout:.0f} s")
        try:
            if self._stopped or self._broken:
                raise PreloadFailed(f"was stopped ({self._broken})" if self._broken else "was stopped")
            timeout, self._boot_timeout = self._boot_timeout, REQUEST_TIMEOUT
            try:
                self._link.settimeout(bound if bound is not None else timeout)
                socket.send_fds(self._link, [message], fds or [])
                answer = self._link.recv(256)
            except OSError as exc:  # (socket.timeout included)
                self._broken = f"gave no answer to {message.decode(errors='replace')!r}"
                raise PreloadFailed(f"gave no answer ({exc or 'timed out'}){self._said()}") from exc
            if not answer:
                self._broken = "had ended"
                raise PreloadFailed(f"had ended{self._said()}")
        finally:
            self._lock.release()
        return answer.decode(errors="replace")

    def _said(self) -> str:
        with contextlib.suppress(OSError, ValueError):  # (closed by stop())
            self._stderr.seek(0)
            said = " | ".join(self._stderr.read()[-2000:].decode(errors="replace").splitlines()[-5:])
            return f"; its stderr: {said}" if said else ""
        return ""

    def fork(self, tag: str) -> Forked:
        """A new agent process tagged `tag`, its pipes open."""
        pipes = [os.pipe() for _ in range(3)]
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
        ours = [pipes[0][1], pipes[1][0], pipes[2][0]]
        try:
            answer = self._ask(f"fork {tag}".encode(), theirs)
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        pidfd = None
        try:
            pid = int(answer)
            pidfd = os.pidfd_open(pid)  # a zombie until reaped: the pid is still its own
            # (read after the pidfd is open: that names the process for good)
            if pid <= 1 or parent_of(Path(f"/proc/{pid}/stat").read_text()) != self.proc.pid:
                raise ValueError(f"pid {pid} is not a child of the preloader (pid {self.proc.pid})")
        except (ValueError, OSError) as exc:
            for fd in ours if pidfd is None else (*ours, pidfd):
                os.close(fd)
            self._broken = f"answered a fork with {answer[:200]!r}"
            raise PreloadFailed(f"answered a fork with {answer[:200]!r} ({exc})") from exc
        return Forked(self, pid, pidfd, ours)

    def reap(self, pid: int) -> int | None:
        """The exit status of its ended child `pid` (-SIGNAL when killed; None: unknown), collected."""
        try:
            answer = self._ask(f"reap {pid}".encode(), bound=REAP_TIMEOUT)
        except PreloadFailed:
            return None  # it ended: its zombies went to init, which collects them
        with contextlib.suppress(ValueError):
            return int(answer)
        return None

    def stop(self, grace: float, forks: bool = True) -> None:
        """End it: its socket closed (it ends), after `grace` seconds SIGKILL to its group (itself: each fork
        leads a session of its own); then, with `forks` (the run's end), every process still carrying its tag
        (a fork of it left running). Without, its forks serve on until their own stop. Bounded."""
        with self._stopping:
            if self._stopped:
                return
            self._stopped = True
        with contextlib.suppress(OSError):  # its end of input; a request waiting for an answer gets none
            self._link.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace)
        if self.proc.returncode is None:  # not reaped: its pid is still its own
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        if forks:
            tagged.kill_tagged(tagged.run_tag(), self.serial)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace + 1)
        if self._lock.acquire(timeout=REQUEST_TIMEOUT):  # (a request gives up at once on a socket shut down)
            self._link.close()
            self._stderr.close()
            self._lock.release()


class Forked:
    """An agent forked by a preloader, with what process.py uses of a subprocess.Popen: its pid, its pipes
    (stdin, stdout, stderr), returncode and wait()."""

    def __init__(self, preloader: Preloader, pid: int, pidfd: int, fds: list[int]) -> None:
        self.pid = pid
        self.pidfd: int | None = pidfd
        self._preloader = preloader
        self.stdin: IO[bytes] = os.fdopen(fds[0], "wb", buffering=0)
        self.stdout: IO[bytes] = os.fdopen(fds[1], "rb", buffering=0)
        self.stderr: IO[bytes] = os.fdopen(fds[2], "rb", buffering=0)
        self.returncode: int | None = None

    def signal(self, signum: int) -> None:
        """Signal it through its pidfd: never another process, even once its preloader is gone and init
        has reaped it (its pid free for another)."""
        if self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(self.pidfd, signum)

    def close(self) -> None:
        """Its pidfd closed (a stop that could not see it end)."""
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def ended_within(self, seconds: float) -> bool:
        """Whether it ended within `seconds` (its pidfd turns readable at its end)."""
        if self.pidfd is None:
            return True
        waiting = select.poll()
        waiting.register(self.pidfd, select.POLLIN)
        return bool(waiting.poll(max(0, int(seconds * 1000))))

    def wait(self, timeout: float) -> int | None:
        """Its exit status once it ended (collected by its preloader); TimeoutExpired after `timeout` seconds."""
        if not self.ended_within(timeout):
            raise subprocess.TimeoutExpired(str(self.pid), timeout)
        if self.pidfd is not None:
            self.returncode = self._preloader.reap(self.pid)
            self.close()
        return self.returncode

