"""Agents forked by a preloader (preload.py, activerecord/preload.rb): each a process of its own, in a
session of its own, tagged as its own; a run's end, Ctrl-C, a killed preloader or a killed leakcheck leave
nothing running. A small Ruby agent served by the real preload.rb, no server."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakcheck.drivers.agents import client as agents
from leakcheck.drivers.agents import process
from leakcheck.drivers.agents.process import AgentProcess
from leakcheck.provision.host import tagged
from tests.support.agents import running

PRELOAD_RB = Path(process.__file__).parent / "activerecord" / "preload.rb"
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


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    if shutil.which("ruby") is None:
        pytest.skip("no ruby on PATH (the preloader here is activerecord's preload.rb)")
    shutil.copy(PRELOAD_RB, tmp_path / "preload.rb")
    (tmp_path / "agent.rb").write_text(AGENT_RB)
    yield tmp_path
    agents.stop_all(hurry=True)


def _start(folder: Path) -> AgentProcess:
    return AgentProcess("forked", ["ruby", f"{folder}/agent.rb"], folder,
                        preload=["ruby", f"{folder}/agent.rb", "--preload", "{fd}"])


def _preloader_pids() -> list[int]:
    return [p.proc.pid for p in process._preloaders.values() if p is not None]


def test_agents_of_a_preloader_are_its_forks_each_in_its_own_session_with_its_own_tag(folder: Path) -> None:
    first, second = _start(folder), _start(folder)
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


def test_an_agent_ending_of_itself_is_seen_ended_and_its_exit_status_collected(folder: Path) -> None:
    agent = _start(folder)
    assert agent.alive
    assert agent._proc.stdin is not None
    agent._proc.stdin.close()  # its input ends: it ends
    agent.stop()
    assert agent._proc.returncode == 0 and running([agent.pid]) == []


def test_after_its_preloader_is_killed_its_forks_serve_on_and_the_next_agents_start_on_their_own(
        folder: Path) -> None:
    forked = _start(folder)
    [preloader] = _preloader_pids()
    os.kill(preloader, 9)
    alone = _start(folder)
    assert alone.request("who")["ppid"] == os.getpid()
    assert forked.request("who")["pid"] == forked.pid  # a fork serving another lane's probe is not cut short
    third = _start(folder)
    assert third.request("who")["ppid"] == os.getpid()
    agents.stop_all(hurry=True)
    assert running([forked.pid, alone.pid, third.pid, preloader]) == []


def test_a_preloader_that_missed_an_answer_is_asked_nothing_more_so_no_agent_takes_another_s_pid(
        folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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
        first = _start(folder)
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
        later = [_start(folder) for _ in range(2)]
        for agent in later:
            assert agent.request("who")["pid"] == agent.pid  # never the late answer read as a pid
            assert agent.request("who")["ppid"] == os.getpid()  # started on their own
    finally:
        agents.stop_all(hurry=True)  # (while init's group is still refused)
    assert refused == []
    assert running([first.pid, *(agent.pid for agent in later), preloader]) == []


def test_an_interrupted_run_ends_preloaded_agents_and_their_preloader(folder: Path) -> None:
    started = [_start(folder) for _ in range(3)]
    [preloader] = _preloader_pids()
    agents.stop_all(hurry=True)  # (Ctrl-C: run/signals.py)
    assert running([*(agent.pid for agent in started), preloader]) == []


_KILLED_RUN = textwrap.dedent("""\
    import sys
    from pathlib import Path
    from leakcheck.drivers.agents import process
    from leakcheck.drivers.agents.process import AgentProcess
    folder = Path(sys.argv[1])
    agent = AgentProcess("forked", ["ruby", f"{folder}/agent.rb"], folder,
                         preload=["ruby", f"{folder}/agent.rb", "--preload", "{fd}"])
    [preloader] = [p.proc.pid for p in process._preloaders.values()]
    print(agent.pid, preloader, flush=True)
    sys.stdin.read()
""")


def test_after_leakcheck_is_killed_its_preloader_and_its_forks_end_with_the_end_of_their_input(folder: Path) -> None:
    with subprocess.Popen([sys.executable, "-c", _KILLED_RUN, str(folder)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as killed:
        assert killed.stdout is not None
        left = [int(pid) for pid in killed.stdout.readline().split()]
        killed.kill()  # SIGKILL: no clean-up of its own
    assert len(left) == 2
    until = time.monotonic() + 10
    while running(left) and time.monotonic() < until:
        time.sleep(0.05)
    assert running(left) == []


def test_a_stop_signal_while_the_preloader_boots_leaves_nothing(folder: Path) -> None:
    script = textwrap.dedent(f"""
        from pathlib import Path
        from leakcheck.drivers.agents.process import AgentProcess
        from leakcheck.run import signals
        signals.install()
        folder = Path({str(folder)!r})
        AgentProcess("forked", ["ruby", f"{{folder}}/agent.rb"], folder, hello_timeout=600,
                     preload=["ruby", f"{{folder}}/agent.rb", "--preload", "{{fd}}"])
    """)
    booting = folder / "booting.pid"
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
