"""A server program starts as the server user, in no supplementary group, with the environment it is given, and
dies with the thread that started it (PDEATHSIG), whether setpriv switches the user (where it is installed: CPython
can then vfork) or subprocess does (without it)."""

from __future__ import annotations

import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakcheck.provision.host import process, system
from leakcheck.provision.host.process import ServerProcess
from leakcheck.provision.host.system import ServerUser

pytestmark = pytest.mark.servers

WAYS = ["setpriv", "subprocess"]


@pytest.fixture(params=WAYS)
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "setpriv" and system.setpriv() is None:
        pytest.skip("setpriv is not installed")
    if request.param == "subprocess":
        monkeypatch.setattr(process, "setpriv_prefix", lambda user, sig: None)
    return str(request.param)


@pytest.fixture
def folder(user: ServerUser, tmp_path: Path) -> Iterator[Path]:
    tmp_path.chmod(0o755)
    user.chown(tmp_path)
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


def status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def sleeping(pid: int) -> bool:
    """Whether the process runs sleep, its exec done (its environment in place)."""
    return Path(f"/proc/{pid}/exe").resolve().name == "sleep" and bool(Path(f"/proc/{pid}/environ").read_bytes())


def sleeper(user: ServerUser, folder: Path) -> ServerProcess:
    return ServerProcess("sleep", ["/bin/sleep", "30"], user, folder, folder / "sleep.out",
                         env={"PATH": "/usr/bin:/bin", "LEAKCHECK_SPAWN_TEST": "1"}, stop_timeout=1.0)


def test_a_server_runs_as_the_server_user_in_no_other_group_with_its_environment(
        way: str, user: ServerUser, folder: Path) -> None:
    server = sleeper(user, folder)
    server.spawn()
    try:
        pid = server.pid
        assert pid is not None
        deadline = time.monotonic() + 5
        while not sleeping(pid) and time.monotonic() < deadline:
            time.sleep(0.01)  # setpriv's exec of the program itself (the kernel sets its environment last)
        seen = status(pid)
        assert seen["Uid"].split() == [str(user.uid)] * 4
        assert seen["Gid"].split() == [str(user.gid)] * 4
        assert seen["Groups"] == ("" if not user.is_self else seen["Groups"])
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert sorted(e for e in environ if e) == [b"LEAKCHECK_SPAWN_TEST=1", b"PATH=/usr/bin:/bin"]
        assert Path(f"/proc/{pid}/cwd").resolve() == folder.resolve()
    finally:
        server.stop()


def test_a_server_dies_with_the_thread_that_started_it(way: str, user: ServerUser, folder: Path) -> None:
    server = sleeper(user, folder)
    starter = threading.Thread(target=server.spawn)
    starter.start()
    starter.join()
    try:
        deadline = time.monotonic() + 5
        while server.exit_code() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.exit_code() == -signal.SIGKILL
    finally:
        server.stop()
