"""Set-up children (apt-get, configure, make, dpkg-deb, `--version` checks) that die with us.

Every one runs with no stdin, a timeout and in its own process group:

- a timeout, Ctrl-C or any other exception while waiting: the whole group is killed (make's
  compilers, apt's download methods, a shell script's `sleep`), then the child is reaped;
- leakcheck killed, even with SIGKILL (no cleanup code runs): the kernel's parent-death signal
  (PR_SET_PDEATHSIG) reaches a small supervisor that kills the whole group, so no apt-get keeps
  its lock and no npm or make keeps writing into the cache.

Why a supervisor: Linux clears a process's parent-death signal whenever its credentials change,
and apt-get does that (it switches its effective uid to `_apt` and back to check its folders),
so apt-get itself would outlive us. The supervisor (`python -I -c`, about 25 ms) never changes
credentials. Short `--version` checks run unsupervised: they get the signal directly.

The signal is tied to the thread that started the child: call these from the thread that lives
as long as the child (leakcheck's set-up runs in the main thread).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from leakcheck.provision.host.system import die_with_parent

#: Run as `python -I -c SUPERVISOR <leakcheck's pid> argv...`: starts argv in this process group and
#: SIGKILLs the whole group when leakcheck dies (or when told to stop with SIGTERM). Exits with
#: argv's exit code (128 + N when a signal N ended it; 127 when it could not be started).
SUPERVISOR = r"""
import ctypes, os, signal, subprocess, sys
def stop(*_):
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGTERM, stop)
if sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):  # leakcheck died before the line above
    stop()
try:
    child = subprocess.Popen(sys.argv[2:])
except OSError as exc:
    sys.stderr.write(f"cannot run {sys.argv[2]}: {exc.strerror or exc}\n")
    sys.exit(127)
code = child.wait()
sys.exit(code if code >= 0 else 128 - code)
"""


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    log: IO[str] | None = None,
    supervised: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a set-up step to its end: text output captured (or both streams into `log`).

    Raises subprocess.TimeoutExpired (after killing its process group) when it runs longer than
    `timeout` seconds. A program that cannot be started is exit code 127 with the reason on
    stderr when supervised, else OSError. A non-zero exit is the caller's to judge.
    `supervised=False` is for quick programs that never change their credentials (`--version`).
    """
    command = list(argv)
    if supervised:
        command = [sys.executable, "-I", "-c", SUPERVISOR, str(os.getpid()), *command]
    with subprocess.Popen(
        command,
        cwd=cwd,
        env=None if env is None else dict(env),
        stdin=subprocess.DEVNULL,
        stdout=log if log is not None else subprocess.PIPE,
        stderr=subprocess.STDOUT if log is not None else subprocess.PIPE,
        text=True,
        errors="replace",
        process_group=0,  # its own group, so that everything it started can be killed with it
        preexec_fn=die_with_parent,  # noqa: PLW1509 (PDEATHSIG needs it; set-up runs no threads that fork)
    ) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        except BaseException:  # timeout, KeyboardInterrupt, SIGTERM turned into an exception
            kill_group(child)
            raise
        return subprocess.CompletedProcess(list(argv), child.returncode, out or "", err or "")


def kill_group(child: subprocess.Popen[str]) -> None:
    """SIGKILL the child's process group and reap the child (its pipes are closed on exit)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        child.kill()
    child.wait()
