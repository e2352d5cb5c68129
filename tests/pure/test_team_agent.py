"""`--drivers=cmd:PATH`: a team's agent is checked before any server starts (exists, executable,
answers `hello` with protocol 1 and a driver name within a bound), else one line; its id is
prefixed `cmd-`; it runs as an unprivileged user of its own (as root), never as the servers' user."""

from __future__ import annotations

import argparse
import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakcheck.config.config import Config
from leakcheck.discover import command
from leakcheck.drivers.agents import team
from leakcheck.drivers.clients import driver_version
from leakcheck.drivers.settings import cell_settings
from leakcheck.model.errors import UsageError
from leakcheck.provision.host import system
from leakcheck.provision.host.system import AGENT_USER, server_user
from tests.support.agents import HELLO, agent_folder, hello, write_agent


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder the servers' user can read (pytest's tmp_path is root's own, 0700)."""
    yield from agent_folder()


def _agent(folder: Path, body: str, name: str = "agent", mode: int = 0o755) -> Path:
    return write_agent(folder, body, name, mode)


def _hello(protocol: int = 1, driver: str = "myorm", then: str = "") -> str:
    return hello(str(protocol), driver, then)


def test_a_team_agent_that_says_hello_gets_a_prefixed_id_with_its_release(folder: Path) -> None:
    path = _agent(folder, _hello(), "ok-agent")
    driver = team.team_driver(f"cmd:{path}")
    assert driver.value == "cmd-myorm" and not driver.native
    assert str(driver_version(driver)) == "1.2.0"
    assert team.spelled(driver) == f"cmd:{path}"


def test_as_root_a_team_agent_runs_as_its_own_unprivileged_user_not_the_servers(folder: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root runs a team agent as another user")
    folder.chmod(0o1777)  # the agent writes its ids here, whoever it runs as
    path = _agent(folder, _hello(driver="whoami", then="open(os.path.join(os.path.dirname(__file__), 'uid'), 'w')"
                                                       ".write(f'{os.getuid()} {os.getgid()} {os.getgroups()}')"),
                  "uid-agent")
    team.team_driver(f"cmd:{path}")
    uid, gid, groups = (folder / "uid").read_text().split(" ", 2)
    assert int(uid) == pwd.getpwnam(AGENT_USER).pw_uid and int(uid) not in (0, server_user().uid)
    assert int(gid) not in (0, server_user().gid) and groups == "[]"


def test_without_root_a_team_agent_is_refused_rather_than_run_as_the_servers_user(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _agent(folder, _hello(driver="mine"), "mine-agent")
    monkeypatch.setattr(system.os, "geteuid", lambda: 4242)
    with pytest.raises(UsageError, match=f"runs as the unprivileged user {AGENT_USER}, never as the user that runs"):
        team.team_driver(f"cmd:{path}")


def test_drivers_takes_a_team_agent_beside_the_shipped_ones(folder: Path) -> None:
    path = _agent(folder, _hello(driver="inmatrix"), "matrix-agent")
    config = Config.from_strings({"leakcheck_drivers": f"psycopg,cmd:{path}"})
    assert [d.value for d in config.drivers] == ["psycopg", "cmd-inmatrix"]


@pytest.mark.parametrize(("body", "mode", "message"), [
    (None, 0o755, "no such file"),
    (_hello(), 0o644, "not executable"),
    ("sys.exit(3)", 0o755, "no protocol 1 hello"),
    ("print('hello there', flush=True)\nsys.stdin.read()", 0o755, "no protocol 1 hello"),
    (_hello(protocol=2), 0o755, "no protocol 1 hello"),
    (_hello(driver="My ORM!"), 0o755, "names the driver 'My ORM!'"),
    ("sys.stdin.read()", 0o755, "no protocol 1 hello.*within 1 s"),
])
def test_a_team_agent_that_is_not_one_is_a_one_line_usage_error(folder: Path, body: str | None, mode: int,
                                                                message: str) -> None:
    path = folder / "missing" if body is None else _agent(folder, body, mode=mode)
    with pytest.raises(UsageError, match=message) as raised:
        team.team_driver(f"cmd:{path}", timeout=1.0)
    assert "\n" not in str(raised.value) and str(path) in str(raised.value)


def test_two_team_agents_that_call_themselves_the_same_are_refused(folder: Path) -> None:
    team.team_driver(f"cmd:{_agent(folder, _hello(driver='twin'), 'one')}")
    with pytest.raises(UsageError, match="both call themselves 'twin'"):
        team.team_driver(f"cmd:{_agent(folder, _hello(driver='twin'), 'two')}")


def test_an_unreadable_agent_is_refused_before_it_runs(folder: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root runs a team agent as another user")
    path = _agent(folder, _hello(driver="private"), "private-agent", mode=stat.S_IRWXU)
    with pytest.raises(UsageError, match="cannot read and run it"):
        team.team_driver(f"cmd:{path}")


def test_discover_takes_a_shipped_agent_or_a_team_agent_as_its_driver(folder: Path) -> None:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    path = _agent(folder, _hello(driver="discovered"), "discover-agent")
    for given, expected in (("node-postgres", "node-postgres"), (f"cmd:{path}", "cmd-discovered")):
        args = parser.parse_args(["--pg=16", "--bouncer=1.18", f"--driver={given}", "--database=none"])
        assert command.options(args).driver.value == expected
    args = parser.parse_args(["--pg=16", "--bouncer=1.18", f"--driver=cmd:{folder}/nothing", "--database=none"])
    with pytest.raises(UsageError, match="--driver: cmd:.*/nothing: no such file"):
        command.options(args)


def _hello_with(driver: str, settings: str) -> str:
    hello = (HELLO % (1, driver))[:-1] + f', "settings": {settings}}}'
    return f"line = sys.stdin.readline()\nprint({hello!r}, flush=True)\nsys.stdin.read()"


def test_a_team_agents_hello_lists_the_settings_driver_set_may_give_it(folder: Path) -> None:
    path = _agent(folder, _hello_with("settable", '{"pool": "on", "names": "orm"}'), "settable-agent")
    config = Config.from_strings({"leakcheck_drivers": f"cmd:{path}",
                                  "leakcheck_driver_set": "cmd-settable:pool=off,on\ncmd-settable:names=orm"})
    assert [(a.driver, a.name, a.values) for a in config.driver_axes] == [
        ("cmd-settable", "pool", ("off", "on")), ("cmd-settable", "names", ("orm",))]
    assert cell_settings("cmd-settable", (("pool", "off"), ("names", "orm"))) == (("pool", "off"),)


@pytest.mark.parametrize(("settings", "line", "message"), [
    ('{"pool": "on"}', "cmd-strict:prepare=false", "cmd-strict has no setting 'prepare'; its settings are: pool"),
    ("null", "cmd-bare:pool=off", "cmd-bare has no setting 'pool'; its settings are: none \\(its hello lists no "
     "\"settings\"\\)"),
])
def test_a_setting_a_team_agents_hello_does_not_list_is_one_line_before_any_server_starts(
        folder: Path, settings: str, line: str, message: str) -> None:
    name = line.split(":")[0].removeprefix("cmd-")
    path = _agent(folder, _hello_with(name, settings), f"{name}-agent")
    with pytest.raises(UsageError, match=message) as raised:
        Config.from_strings({"leakcheck_drivers": f"cmd:{path}", "leakcheck_driver_set": line})
    assert "\n" not in str(raised.value)


def test_a_team_agents_hello_with_settings_of_another_shape_is_one_line(folder: Path) -> None:
    path = _agent(folder, _hello_with("shapeless", '["pool"]'), "shapeless-agent")
    with pytest.raises(UsageError, match="its hello's settings must be an object of setting names") as raised:
        team.team_driver(f"cmd:{path}")
    assert "\n" not in str(raised.value)


def test_discover_gives_a_team_agent_one_value_of_a_setting_its_hello_lists(folder: Path) -> None:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    path = _agent(folder, _hello_with("searched", '{"pool": "on"}'), "searched-agent")
    given = ["--pg=16", "--bouncer=1.18", f"--driver=cmd:{path}", "--database=none"]
    opts = command.options(parser.parse_args([*given, "--driver-set=cmd-searched:pool=off"]))
    assert (opts.driver.value, opts.driver_settings, opts.client) == ("cmd-searched", (("pool", "off"),),
                                                                      "cmd-searched[pool=off]")
    with pytest.raises(UsageError, match="cmd-searched has no setting 'size'; its settings are: pool"):
        command.options(parser.parse_args([*given, "--driver-set=cmd-searched:size=1"]))


def test_leakcheck_diff_reads_a_team_agents_cells_with_the_defaults_its_hello_lists(
        folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from leakcheck.cli.main import main
    from leakcheck.model.target import Route
    from leakcheck.model.verdicts import Verdict
    from leakcheck.results.results import Results, save
    from tests.pure.outcomes import make

    path = _agent(folder, _hello_with("differ", '{"pool": "on"}'), "differ-agent")
    outcomes = tuple(make("timezone", "16.14", bouncer, Route.TRANSACTION, "cmd-differ", verdict, f"on {bouncer}",
                          driver_version="1.2.0") for bouncer, verdict in (("1.24.1", Verdict.LEAKS),
                                                                           ("1.26.1", Verdict.ISOLATED)))
    save(tmp_path / "r.json", Results(outcomes))
    # pool=on is the hello's default: those cells are the ones measured without --driver-set
    code = main(["diff", "pg16/pgbouncer1.24/cmd-differ[pool=on]", "pg16/pgbouncer1.26/cmd-differ[pool=on]",
                 f"--drivers=cmd:{path}", f"--results={tmp_path / 'r.json'}"])
    out = capsys.readouterr().out
    assert code == 0 and "timezone" in out and "cmd-differ" in out, out


def test_leakcheck_diff_of_a_team_agents_cell_without_its_path_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from leakcheck.cli.main import main

    assert main(["diff", "pg16/pgbouncer1.24/cmd-nowhere", "pg16/pgbouncer1.26/cmd-nowhere"]) == 4
    err = capsys.readouterr().err
    assert "names a team agent (cmd-nowhere): give its path with --drivers=cmd:PATH" in err and err.count("\n") == 1
