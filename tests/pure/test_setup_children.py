"""Set-up children (apt-get, npm, configure, make, dpkg-deb, --version) die with leakcheck, even on SIGKILL."""

from __future__ import annotations

import inspect
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from leakcheck.provision.host import children
from leakcheck.provision.pgbouncer import build as bouncer_build
from leakcheck.provision.postgres import binaries as pg_binaries
from leakcheck.provision.sources import banners, debian, program_folder

_PARENT = """
import sys
from leakcheck.provision.host import children
children.run(sys.argv[1:], timeout=60)
"""
#: A child that writes its pid to argv[1] and sleeps; the second one first switches its effective
#: uid away and back, as apt-get does (which clears the kernel's parent-death signal).
_SLEEPER = ["sh", "-c", "echo $$ > $0; exec sleep 30"]
_SWITCHER = [
    sys.executable,
    "-c",
    "import os, sys, time; os.setresuid(-1, 65534, -1); os.setresuid(-1, 0, -1); "
    "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(30)",
]


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its new parent to reap it counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_for(seconds: float, check: Callable[[], object]) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize(
    "child",
    [
        pytest.param(_SLEEPER, id="plain"),
        pytest.param(
            _SWITCHER,
            id="switches-uid-like-apt-get",
            marks=pytest.mark.skipif(os.geteuid() != 0, reason="only root can switch its uid"),
        ),
    ],
)
def test_a_set_up_child_is_killed_when_leakcheck_is_killed_with_sigkill(tmp_path: Path, child: list[str]) -> None:
    marker = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, *child, str(marker)], stdin=subprocess.DEVNULL)
    pid = 0
    try:
        assert _wait_for(10, lambda: marker.is_file() and marker.read_text().strip()), "the child never started"
        pid = int(marker.read_text())
        assert _alive(pid)
        parent.send_signal(signal.SIGKILL)  # no cleanup code of the parent can run
        parent.wait(timeout=10)
        assert _wait_for(5, lambda: not _alive(pid)), f"set-up child {pid} outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if pid and _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_set_up_step_that_runs_too_long_is_killed_with_its_own_children(tmp_path: Path) -> None:
    marker = tmp_path / "grandchild.pid"
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        children.run(["sh", "-c", f"sleep 30 & echo $! > {marker}; wait"], timeout=0.5)
    assert time.monotonic() - started < 5
    assert _wait_for(5, lambda: not _alive(int(marker.read_text())))


@pytest.mark.parametrize("module", [bouncer_build, program_folder, debian, pg_binaries, banners])
def test_set_up_modules_start_children_only_through_the_helper(module: ModuleType) -> None:
    source = inspect.getsource(module)
    assert "subprocess.run(" not in source and "subprocess.Popen(" not in source
