"""Agents forked by a preloader (preload.py; activerecord/preload.rb and django/preload.py, the Python ORM
agents'): each a process of its own, in a session of its own, tagged as its own; a run's end, Ctrl-C, a
killed preloader or a killed leakcheck leave nothing running. Small Ruby and Python agents served by the
real preloaders, no server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from leakcheck.drivers.agents import client as agents
from leakcheck.drivers.agents import process
from leakcheck.drivers.agents.process import AgentProcess
from leakcheck.provision.host import tagged
from tests.support.agents import running

AGENTS = Path(process.__file__).parent
#: A Ruby agent that answers every request with its pid, its parent's and its tag; `--preload FD`: its preloader.
AGENT_RB = textwrap.dedent("""\
    require "json"
    def serve
      $stdin.each_line do |line|
        id = JSON.parse(line)["id"]
        $stdout.write(JSON.generate({ "id" => id, "ok" => true, "protocol" => 1, "driver" => "forked",
                                      "pid" => Process.pid, "ppid" => Process.ppid,
                                      "tag" => ENV["LEAKCHECK_AGENT"] }) + "\\n")
        $stdout.flush
        raise "asked to end" if JSON.parse(line)["op"] == "end" # answered, it ends with exit status 1
      end
    end
    if ARGV.first == "--preload"
      if ENV["SLOW_BOOT"] # a boot that never ends: its pid recorded there
        File.write(ENV["SLOW_BOOT"], Process.pid.to_s)
        sleep(600)
      end
      require_relative "preload"
      Preload.serve(Integer(ARGV[1]), "forked-agent") { serve }
    else
      serve
    end
""")
#: The same in Python, which also answers a random number and its threads; `--preload FD`: its preloader
#: (STARTED_THREAD: its imports start a thread, as some libraries' do).
AGENT_PY = textwrap.dedent("""\
    import json, os, random, sys, threading, time
    def serve():
        for line in sys.stdin:
            request = json.loads(line)
            sys.stdout.write(json.dumps({"id": request["id"], "ok": True, "protocol": 1, "driver": "forked",
                                         "pid": os.getpid(), "ppid": os.getppid(),
                                         "tag": os.environ.get("LEAKCHECK_AGENT"), "random": random.random(),
                                         "threads": threading.active_count()}) + "\\n")
            sys.stdout.flush()
            if request["op"] == "end":
                raise RuntimeError("asked to end")  # answered, it ends with exit status 1
    if sys.argv[1:2] == ["--preload"]:
        if os.environ.get("SLOW_BOOT"):  # a boot that never ends: its pid recorded there
            with open(os.environ["SLOW_BOOT"], "w") as f:
                f.write(str(os.getpid()))
            time.sleep(600)
        if os.environ.get("STARTED_THREAD"):
            threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
        import preload
        preload.serve(int(sys.argv[2]), serve)
    else:
        serve()
""")


@dataclass(frozen=True)
class Kind:
    """An agent of one language with its preloader, in a folder."""

    folder: Path
    #: its interpreter and file: the agent's command, and with `--preload {fd}` its preloader's
    command: tuple[str, ...]

    @property
    def argv(self) -> list[str]:
        return list(self.command)

    @property
    def preload(self) -> list[str]:
        return [*self.command, "--preload", "{fd}"]


@pytest.fixture(params=("ruby", "python"))
def kind(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Kind]:
    if request.param == "ruby":
        if shutil.which("ruby") is None:
            pytest.skip("no ruby on PATH (the preloader here is activerecord's preload.rb)")
        shutil.copy(AGENTS / "activerecord" / "preload.rb", tmp_path / "preload.rb")
        (tmp_path / "agent.rb").write_text(AGENT_RB)
        yield Kind(tmp_path, ("ruby", f"{tmp_path}/agent.rb"))
    else:
        yield _python(tmp_path)
    agents.stop_all(hurry=True)


def _python(folder: Path) -> Kind:
    shutil.copy(AGENTS / "django" / "preload.py", folder / "preload.py")
    (folder / "agent.py").write_text(AGENT_PY)
    return Kind(folder, (sys.executable, f"{folder}/agent.py"))


def _start(kind: Kind) -> AgentProcess:
    return AgentProcess("forked", kind.argv, kind.folder, preload=kind.preload)


def _preloader_pids() -> list[int]:
    return [p.proc.pid for p in process._preloaders.values() if p is not None]


def test_agents_of_a_preloader_are_its_forks_each_in_its_own_session_with_its_own_tag(kind: Kind) -> None:
    first, second = _start(kind), _start(kind)
    [preloader] = _preloader_pids()
    for agent in (first, second):
        answer = agent.request("who")
        assert (answer["pid"], answer["ppid"]) == (agent.pid, preloader)
        assert os.getsid(agent.pid) == os.getpgid(agent.pid) == agent.pid
        assert answer["tag"] == tagged.tag(agent._serial)
    first.stop()
    assert running([first.pid]) == [] and second.alive and not first.alive
    process.stop_every()
    assert running([second.pid, preloader]) == []
    assert process._preloaders == {}


def test_an_agent_ending_of_itself_is_seen_ended_and_its_exit_status_collected(kind: Kind) -> None:
    agent = _start(kind)
    assert agent.alive
    assert agent._proc.stdin is not None
    agent._proc.stdin.close()  # its input ends: it ends
    agent.stop()
    assert agent._proc.returncode == 0 and running([agent.pid]) == []


def test_after_its_preloader_is_killed_its_forks_serve_on_and_the_next_agents_start_on_their_own(
        kind: Kind) -> None:
    forked = _start(kind)
    [preloader] = _preloader_pids()
    os.kill(preloader, 9)
    alone = _start(kind)
    assert alone.request("who")["ppid"] == os.getpid()
    assert forked.request("who")["pid"] == forked.pid  # a fork serving another lane's probe is not cut short
    third = _start(kind)
    assert third.request("who")["ppid"] == os.getpid()
    agents.stop_all(hurry=True)
    assert running([forked.pid, alone.pid, third.pid, preloader]) == []


def test_a_preloader_that_missed_an_answer_is_asked_nothing_more_so_no_agent_takes_another_s_pid(
        kind: Kind, monkeypatch: pytest.MonkeyPatch) -> None:
    refused: list[int] = []
    signalled = os.killpg

    def killpg(pgid: int, signum: int) -> None:
        if pgid <= 1:  # (a late exit status 1 read as a pid: init's group) refused, never sent
            refused.append(pgid)
            raise PermissionError(pgid)
        signalled(pgid, signum)

    monkeypatch.setattr(os, "killpg", killpg)
    later: list[AgentProcess] = []
    try:
        first = _start(kind)
        [preloader] = _preloader_pids()
        first.request("end")
        until = time.monotonic() + 10
        while first.alive and time.monotonic() < until:
            time.sleep(0.02)
        os.kill(preloader, signal.SIGSTOP)  # its answer to the reap of `first` (1, its exit status) comes late
        try:
            first.stop()
        finally:
            os.kill(preloader, signal.SIGCONT)
        time.sleep(0.2)  # the late answer is on the socket now
        later = [_start(kind) for _ in range(2)]
        for agent in later:
            assert agent.request("who")["pid"] == agent.pid  # never the late answer read as a pid
            assert agent.request("who")["ppid"] == os.getpid()  # started on their own
    finally:
        agents.stop_all(hurry=True)  # (while init's group is still refused)
    assert refused == []
    assert running([first.pid, *(agent.pid for agent in later), preloader]) == []


def test_an_interrupted_run_ends_preloaded_agents_and_their_preloader(kind: Kind) -> None:
    started = [_start(kind) for _ in range(3)]
    [preloader] = _preloader_pids()
    agents.stop_all(hurry=True)  # (Ctrl-C: run/signals.py)
    assert running([*(agent.pid for agent in started), preloader]) == []


_KILLED_RUN = textwrap.dedent("""\
    import json, sys
    from pathlib import Path
    from leakcheck.drivers.agents import process
    from leakcheck.drivers.agents.process import AgentProcess
    folder, command = Path(sys.argv[1]), json.loads(sys.argv[2])
    agent = AgentProcess("forked", command, folder, preload=[*command, "--preload", "{fd}"])
    [preloader] = [p.proc.pid for p in process._preloaders.values()]
    print(agent.pid, preloader, flush=True)
    sys.stdin.read()
""")


def test_after_leakcheck_is_killed_its_preloader_and_its_forks_end_with_the_end_of_their_input(kind: Kind) -> None:
    with subprocess.Popen([sys.executable, "-c", _KILLED_RUN, str(kind.folder), json.dumps(kind.command)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as killed:
        assert killed.stdout is not None
        left = [int(pid) for pid in killed.stdout.readline().split()]
        killed.kill()  # SIGKILL: no clean-up of its own
    assert len(left) == 2
    until = time.monotonic() + 10
    while running(left) and time.monotonic() < until:
        time.sleep(0.05)
    assert running(left) == []


def test_a_stop_signal_while_the_preloader_boots_leaves_nothing(kind: Kind) -> None:
    script = textwrap.dedent(f"""
        from pathlib import Path
        from leakcheck.drivers.agents.process import AgentProcess
        from leakcheck.run import signals
        signals.install()
        command = {kind.argv!r}
        AgentProcess("forked", command, Path({str(kind.folder)!r}), hello_timeout=600,
                     preload=[*command, "--preload", "{{fd}}"])
    """)
    booting = kind.folder / "booting.pid"
    with subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.DEVNULL,
                          env={**os.environ, "SLOW_BOOT": str(booting)}) as proc:
        until = time.monotonic() + 10
        while not booting.exists() and time.monotonic() < until:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert running([int(booting.read_text())]) == []


@pytest.fixture
def python(tmp_path: Path) -> Iterator[Kind]:
    yield _python(tmp_path)
    agents.stop_all(hurry=True)


def test_python_forks_draw_different_random_numbers_and_run_only_their_own_threads(python: Kind) -> None:
    # as gunicorn's workers: Python reseeds `random` in a fork; the preloader ran no thread, and each fork
    # runs the one of its request loop
    answers = [_start(python).request("who") for _ in range(3)]
    assert len({answer["ppid"] for answer in answers}) == 1 and os.getpid() not in {a["ppid"] for a in answers}
    assert len({answer["random"] for answer in answers}) == 3, answers
    assert {answer["threads"] for answer in answers} == {1}


def test_a_python_preloader_whose_imports_started_a_thread_forks_nothing_and_its_agents_start_on_their_own(
        python: Kind, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # a fork copies no thread but the one that forks, and every lock another thread held stays held in it
    monkeypatch.setenv("STARTED_THREAD", "1")
    started = [_start(python) for _ in range(2)]
    assert [agent.request("who")["ppid"] for agent in started] == [os.getpid()] * 2, caplog.text
    assert "the agent's imports started threads" in caplog.text, caplog.text
    assert process._preloaders != {} and _preloader_pids() == [], process._preloaders
