"""A team's agent is a program leakcheck does not control: one that leaves a child holding its pipes,
ignores SIGTERM and the end of its input, daemonizes a grandchild, writes a 100 MB line or a hello of
another shape still ends within bounds, in one line naming it, and nothing it started outlives it.
Real processes (small Python programs), no server."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from leakcheck.discover import command
from leakcheck.drivers.agents import client as agents
from leakcheck.drivers.agents import team
from leakcheck.drivers.agents.process import STOP_TIMEOUT, AgentFault, AgentProcess
from leakcheck.model.errors import UsageError
from leakcheck.provision.host.sweep import sweep
from leakcheck.provision.host.system import AGENT_USER, agent_user
from tests.support.agents import agent_folder, hello, recorded, running, write_agent

#: Seconds a stop may take at most here: the end of input's grace, SIGTERM's, and a margin.
STOP_BOUND = STOP_TIMEOUT + 10

#: Starts a child (`sleep`) that keeps the agent's stdout and stderr open, and records it.
HOLDS_PIPES = "child = subprocess.Popen(['sleep', '300'])\nrecord(child.pid)\n"
#: Ignores SIGINT and the end of its input; SIGTERM too, recording when it came.
STUBBORN = ("signal.signal(signal.SIGTERM, lambda *_: record(time.monotonic(), 'term'))\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\n")
#: A helper child that closed its stdio (it holds no pipe, so nothing waits for it).
HELPER = ("child = subprocess.Popen(['sleep', '300'], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, "
          "stderr=subprocess.DEVNULL)\nrecord(child.pid)\n")
#: A daemon: double fork, its own session (out of the agent's process group), stdio closed.
DAEMON = textwrap.dedent("""\
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        pid = os.fork()
        if pid == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            time.sleep(300)
            os._exit(0)
        os.write(w, str(pid).encode())
        os._exit(0)
    os.close(w)
    record(int(os.read(r, 32)))
    os.wait()
""")


@pytest.fixture
def folder() -> Iterator[Path]:
    yield from agent_folder()


@pytest.fixture(autouse=True)
def _stop_agents() -> Iterator[None]:
    yield
    agents.stop_all(hurry=True)


def _start(path: Path) -> AgentProcess:
    user = agent_user() if os.geteuid() == 0 else None  # as a team's agent runs (without root: as ourselves)
    return AgentProcess("myorm", [str(path)], path.parent, user=user, named=False, about=f"the agent {path}")


def _bounded(work: Callable[[], object], seconds: float) -> None:
    """Runs `work()` in a thread; fails the test when it has not returned within `seconds` (a hang)."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting after {seconds:.0f} s"
    if failed:
        raise failed[0]


def test_a_team_agent_whose_child_keeps_its_stdout_open_is_checked_and_stopped_with_the_child(folder: Path) -> None:
    path = write_agent(folder, hello(driver="holder", then=HOLDS_PIPES), "holder")
    # Before: the check's stop waited for ever on the stdout the child held, deaf to SIGTERM and SIGINT.
    _bounded(lambda: team.team_driver(f"cmd:{path}"), STOP_BOUND)
    assert running(recorded(path)) == []


@pytest.mark.parametrize("child", [HELPER, DAEMON], ids=["helper-with-closed-stdio", "daemonized-grandchild"])
def test_what_an_agent_started_ends_with_it(folder: Path, child: str) -> None:
    path = write_agent(folder, hello(driver="parent", then=child), "parent")
    agent = _start(path)
    started = recorded(path)
    assert running(started) == started and started
    agent.stop()
    assert running([*started, agent.pid]) == []


def test_agents_that_ignore_sigterm_and_the_end_of_their_input_are_stopped_together_and_killed(folder: Path) -> None:
    paths = [write_agent(folder, STUBBORN + hello(driver="stubborn", then="time.sleep(600)"), f"stubborn{i}")
             for i in range(3)]
    started = [_start(path) for path in paths]
    _bounded(agents.stop_all, 2 * STOP_BOUND)
    # Together: each got its SIGTERM at about the same time (one after another, 5 s apart before).
    termed = [float(line) for path in paths for line in (folder / f"{path.name}.term").read_text().split()]
    assert len(termed) == 3 and max(termed) - min(termed) < STOP_TIMEOUT
    assert running([agent.pid for agent in started]) == []


def test_an_interrupted_run_sends_sigterm_with_the_end_of_input_without_waiting(folder: Path) -> None:
    path = write_agent(folder, STUBBORN + hello(driver="hurried", then="time.sleep(600)"), "hurried")
    agent = _start(path)
    began = time.monotonic()
    agents.stop_all(hurry=True)
    termed = [float(line) for line in (folder / "hurried.term").read_text().split()]
    assert termed and termed[0] - began < STOP_TIMEOUT and running([agent.pid]) == []


_HUGE = "sys.stdout.buffer.write(b'x' * 100_000_000 + b'\\n'); sys.stdout.flush()\n"


def test_an_answer_line_of_100_mb_is_one_line_naming_the_agent_not_read_whole(folder: Path) -> None:
    path = write_agent(folder, hello(driver="huge", then=f"sys.stdin.readline()\n{_HUGE}"), "huge")
    agent = _start(path)
    with pytest.raises(AgentFault, match="longer than 16 MiB") as raised:
        agent.request("query", timeout=60, by="A", sql="SELECT 1")
    words = str(raised.value)
    assert "\n" not in words and str(path) in words and len(words) < 1000
    assert running([agent.pid]) == []


def test_a_hung_agents_timeout_names_the_agent_its_path_the_client_and_the_op(folder: Path) -> None:
    path = write_agent(folder, hello(driver="sleepy"), "sleepy")  # reads requests, answers none
    driver = team.team_driver(f"cmd:{path}")
    found = team.registered(driver.value)
    assert found is not None
    agent = found.start()
    with pytest.raises(AgentFault) as raised:
        agent.request("query", timeout=1, by="B", sql="SELECT 1")
    assert f"the cmd-sleepy agent ({path}" in str(raised.value)
    assert "gave no answer to 'query' within 1 s (asked by client B)" in str(raised.value)


@pytest.mark.parametrize(("protocol", "said"), [("true", "said protocol true"), ("1.0", "said protocol 1.0"),
                                                ('"1"', 'said protocol "1"')])
def test_a_hello_whose_protocol_is_not_the_integer_1_is_refused(folder: Path, protocol: str, said: str) -> None:
    name = f"loose-{protocol.strip(chr(34))}"  # (a name of its own: an accepted one would collide)
    path = write_agent(folder, hello(protocol=protocol, driver=name), name)
    with pytest.raises(UsageError, match=f"no protocol 1 hello: .*{said}") as raised:
        team.team_driver(f"cmd:{path}")
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(("extra", "said"), [('"ops": "cancel_key"', 'gave ops "cancel_key", not a list'),
                                             ('"release": 12', "gave release 12, not text"),
                                             ('"no_cancel": true', "gave no_cancel true, not text"),
                                             ('"ends_within": "15"', 'gave ends_within "15", not seconds'),
                                             ('"ends_within": 3600', "gave ends_within 3600, not seconds")])
def test_a_hello_with_a_field_of_another_type_is_refused(folder: Path, extra: str, said: str) -> None:
    name = f"typed-{extra.split(':')[0].strip(chr(34))}".replace("_", "-")
    body = ("line = sys.stdin.readline()\n"
            f"print('{{\"id\": 1, \"ok\": true, \"protocol\": 1, \"driver\": \"{name}\", {extra}}}', flush=True)\n"
            "sys.stdin.read()")
    path = write_agent(folder, body, name)
    with pytest.raises(UsageError, match=said):
        team.team_driver(f"cmd:{path}")


def _loop(folder: Path) -> Path:
    (folder / "loop").symlink_to(folder / "loop")
    return folder / "loop"


def _interpreter(folder: Path) -> Path:
    path = folder / "noded"
    path.write_text("#!/usr/bin/nodex\nconsole.log('hi')\n")
    path.chmod(0o755)
    return path


def _env_name(folder: Path) -> Path:
    path = folder / "env-noded"
    path.write_text("#!/usr/bin/env leakcheck-no-such-runtime\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(("make", "message"), [
    (lambda folder: folder, "a folder, not a program"),
    (_loop, "a symlink loop"),
    (lambda folder: (folder / "dangling").symlink_to(folder / "gone") or folder / "dangling",
     "a symlink to .*/gone, which does not exist"),
    (_interpreter, "its #! interpreter /usr/bin/nodex does not exist"),
    (_env_name, "its #! line runs env leakcheck-no-such-runtime, and no leakcheck-no-such-runtime is on the PATH"),
])
def test_drivers_cmd_that_cannot_be_started_is_one_line_and_exit_4_before_any_server(
        folder: Path, capsys: pytest.CaptureFixture[str], make: Callable[[Path], Path], message: str) -> None:
    from leakcheck.cli.main import main

    path = make(folder)
    assert main(["run", "--pg=16", "--bouncer=1.24", f"--drivers=cmd:{path}", "--controls=no"]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cmd:{path}" in err, err
    assert re.search(message, err), err


def test_a_team_agent_run_as_its_own_user_gets_a_small_environment_not_roots(
        folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root runs a team agent as another user")
    monkeypatch.setenv("LEAKCHECK_TEST_SECRET", "root's own")
    monkeypatch.setenv("LC_TIME", "C.UTF-8")
    then = "open(os.path.join(HERE, 'env.json'), 'w').write(json.dumps(dict(os.environ)))"
    path = write_agent(folder, hello(driver="envious", then=then), "envious")
    team.team_driver(f"cmd:{path}")
    seen = json.loads((folder / "env.json").read_text())
    assert "LEAKCHECK_TEST_SECRET" not in seen and seen["LC_TIME"] == "C.UTF-8"
    assert seen["USER"] == AGENT_USER and seen["HOME"] != os.environ.get("HOME")
    assert set(seen) <= {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LEAKCHECK_AGENT",
                         *(k for k in seen if k.startswith("LC_"))}


@pytest.mark.parametrize(("body", "message"), [
    (HOLDS_PIPES + hello(protocol="true", driver="holds"), "said protocol true"),
    (f"sys.stdin.readline()\n{_HUGE}sys.stdin.read()", "longer than 16 MiB"),
], ids=["child-holds-stdout", "100-mb-hello"])
def test_discover_with_a_hostile_team_agent_is_one_line_within_bounds(folder: Path, body: str, message: str) -> None:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    path = write_agent(folder, body, "hostile")
    args = parser.parse_args(["--pg=16", "--bouncer=1.18", f"--driver=cmd:{path}", "--database=none"])
    failed: list[BaseException] = []

    def check() -> None:
        try:
            command.options(args)
        except UsageError as exc:
            failed.append(exc)

    _bounded(check, STOP_BOUND)
    assert failed and message in str(failed[0]) and "\n" not in str(failed[0])
    assert running(recorded(path, at_least=0)) == []


_KILLED_RUN = textwrap.dedent("""
    import sys
    from pathlib import Path
    from leakcheck.drivers.agents.process import AgentProcess
    path = Path(sys.argv[1])
    agent = AgentProcess("doomed", [str(path)], path.parent)
    print(agent.pid, flush=True)
    sys.stdin.read()
""")


def test_after_leakcheck_is_killed_the_next_runs_sweep_ends_its_agents_and_their_daemons(
        folder: Path, tmp_path: Path) -> None:
    path = write_agent(folder, STUBBORN + hello(driver="doomed", then=DAEMON + "time.sleep(600)"), "doomed")
    with subprocess.Popen([sys.executable, "-c", _KILLED_RUN, str(path)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as killed:
        assert killed.stdout is not None
        left = [int(killed.stdout.readline()), *recorded(path)]
        killed.kill()  # SIGKILL: no clean-up of its own
    live = _start(write_agent(folder, hello(driver="alive"), "alive"))  # this run's own: never swept
    assert running(left) == left
    sweep(tmp=tmp_path)
    assert running(left) == [] and live.alive


def test_a_stop_signal_while_an_agent_starts_leaves_nothing(folder: Path) -> None:
    path = write_agent(folder, STUBBORN + "record(os.getpid())\ntime.sleep(600)", "slow-start")
    script = textwrap.dedent(f"""
        import signal, threading
        from pathlib import Path
        from leakcheck.drivers.agents.process import AgentProcess
        from leakcheck.run import signals
        signals.install()
        path = Path({str(path)!r})
        AgentProcess("slow", [str(path)], path.parent, hello_timeout=600)
    """)
    with subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.DEVNULL) as proc:
        started = recorded(path)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_BOUND)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert started and running(started) == []
