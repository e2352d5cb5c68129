"""Every bad input stops the run before any server starts: exit code 4 and one `ERROR:` line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

#: A valid tiny selection: with it, only the input under test can be wrong.
SMALL = ["--pg=16", "--bouncer=1.24", "--drivers=psycopg", "--probes=timezone", "--controls=no"]


def one_usage_error(result: pytest.RunResult) -> str:
    """The one error line of a run that stopped on bad input (nothing else on stderr)."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stderr.str()
    lines = [line for line in result.stderr.lines if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: "), lines
    assert "test_leak" not in result.stdout.str()  # nothing was collected, so nothing started
    return lines[0]


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    by_flag = {a.split("=", 1)[0] for a in args}
    defaults = [a for a in SMALL if a.split("=", 1)[0] not in by_flag]
    return pytester.runpytest_inprocess(*defaults, *args)


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("--pg=", "--pg is given but empty"),
        ("--bouncer=", "--bouncer is given but empty"),
        ("--probes=", "--probes is given but empty"),
        ("--drivers=", "--drivers is given but empty"),
        ("--controls=", "--controls is given but empty"),
        ("--backend=", "--backend is given but empty"),
        ("--expect=", "--expect is given but empty"),
        ("--record=", "--record is given but empty"),
        ("--pg-image=", "--pg-image is given but empty"),
        ("--bouncer-image=", "--bouncer-image is given but empty"),
        ("--pg= ", "--pg is given but empty"),
        ("--probes=,", "--probes=',' is not valid"),
        ("--probes=timezone,", "--probes='timezone,' is not valid"),
        ("--drivers=psycopg,,asyncpg", "--drivers='psycopg,,asyncpg' is not valid"),
        ("--pg=１６", "--pg='１６' is not valid"),
        ("--pg=16.a", "--pg='16.a' is not valid"),
        ("--bouncer=1.2٤", "--bouncer='1.2٤' is not valid"),
        ("--pg=/nonexistent/leakcheck/bin", "/nonexistent/leakcheck/bin does not exist"),
        ("--bouncer-image=pgbouncer:{tag}", "--bouncer-image='pgbouncer:{tag}' is not valid"),
        ("--odyssey-image=", "--odyssey-image is given but empty"),
        ("--pgpool-image=pgpool:{tag}", "--pgpool-image='pgpool:{tag}' is not valid"),
    ],
)
def test_a_bad_or_empty_option_value_is_one_line_and_exit_code_4(
    pytester: pytest.Pytester, arg: str, message: str
) -> None:
    assert message in one_usage_error(run(pytester, arg))


@pytest.mark.parametrize(
    ("ini", "message"),
    [
        ("leakcheck_pg =", "--pg is given but empty"),
        ("leakcheck_probes = ,", "--probes=',' is not valid"),
        ("leakcheck_record =", "--record is given but empty"),
    ],
)
def test_an_empty_or_bad_ini_key_is_one_line_and_exit_code_4(pytester: pytest.Pytester, ini: str,
                                                            message: str) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    flags = [a for a in SMALL if not a.startswith(("--pg=", "--probes=" if "probes" in ini else "-"))]
    assert message in one_usage_error(pytester.runpytest_inprocess(*flags))


@pytest.mark.parametrize(("pooler", "option"), [("odyssey:1.5", "--odyssey-image"), ("pgpool:4.3", "--pgpool-image")])
def test_a_pooler_on_the_containers_backend_without_its_image_is_one_line_naming_the_option(
    pytester: pytest.Pytester, pooler: str, option: str
) -> None:
    line = one_usage_error(run(pytester, "--backend=containers", f"--pooler={pooler}"))
    assert f"--pooler={pooler} on the containers backend needs an image: give {option}" in line


def test_an_option_not_given_keeps_its_default(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain(): pass")
    pytester.runpytest_inprocess("-q").assert_outcomes(passed=1)


def test_a_leakcheck_flag_without_the_matrix_is_refused_rather_than_ignored(pytester: pytest.Pytester) -> None:
    line = one_usage_error(pytester.runpytest_inprocess("--record=m.json"))
    assert "--record given, but the leak matrix is off" in line


# --- --expect --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist; record one with --record="),
        ("not json", "is neither JSON nor TOML"),
        ('{"format":1,"verdicts":null}', "is not a leakcheck baseline (verdicts is NoneType"),
        ('{"format":1,"verdicts":{"pg16/pgbouncer1.24/psycopg/timezone":"error"}}',
         "an error never passes a gate; re-record"),
        ('{"format":1,"verdicts":{"pg16/pgbouncer1.24/psycopg/timezone":"skipped"}}',
         "an error never passes a gate; re-record"),
        ("DIR", "is a folder"),
    ],
)
def test_a_gate_file_that_is_missing_or_lies_stops_the_run_before_it_starts(
    pytester: pytest.Pytester, content: str | None, message: str
) -> None:
    path = pytester.path / "m.json"
    if content == "DIR":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    line = one_usage_error(run(pytester, "--expect=m.json"))
    assert line.startswith("ERROR: --expect: m.json") and message in line


# --- --record --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("DIR", "--record: m.json is a folder"),
        ("FILE/m.json", "is a file"),
        ("NOT_A_MATRIX", "is not a leakcheck baseline"),
        ("/proc/leakcheck/m.json", "--record: cannot create /proc/leakcheck"),
    ],
)
def test_a_record_path_that_cannot_be_written_stops_the_run_before_it_starts(
    pytester: pytest.Pytester, target: str, message: str
) -> None:
    arg = target
    if target == "DIR":
        (pytester.path / "m.json").mkdir()
        arg = "m.json"
    elif target == "FILE/m.json":
        (pytester.path / "FILE").write_text("")
    elif target == "NOT_A_MATRIX":
        (pytester.path / "m.json").write_text(json.dumps({"format": 1, "verdicts": None}))
        arg = "m.json"
    assert message in one_usage_error(run(pytester, f"--record={arg}", "--controls=yes"))  # --record needs them
    if target == "NOT_A_MATRIX":  # left as it was
        assert json.loads((pytester.path / "m.json").read_text()) == {"format": 1, "verdicts": None}


# --- environment variables -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("LEAKCHECK_RUN_AS", "leakcheck-no-such-user", "LEAKCHECK_RUN_AS='leakcheck-no-such-user' is not a user"),
        ("LEAKCHECK_RUN_AS", "root", "LEAKCHECK_RUN_AS='root' is root (uid 0)"),
        ("LEAKCHECK_PGBOUNCER_URL", "https://example.org/pgbouncer.tar.gz", "LEAKCHECK_PGBOUNCER_URL="),
        ("LEAKCHECK_PGBOUNCER_URL", "ftp://example.org/pgbouncer-{version}.tar.gz", "LEAKCHECK_PGBOUNCER_URL="),
        ("LEAKCHECK_PGBOUNCER_URL", "pgbouncer-{version}.tar.gz", "LEAKCHECK_PGBOUNCER_URL="),
        ("LEAKCHECK_PGBOUNCER_TARBALLS", "/nonexistent/tarballs", "an existing file or folder"),
        ("LEAKCHECK_CACHE", "/proc/leakcheck-cache", "cannot create the leakcheck cache /proc/leakcheck-cache"),
        ("TMPDIR", "/nonexistent/tmp", "TMPDIR=/nonexistent/tmp is not an existing folder"),
    ],
)
def test_a_bad_environment_variable_is_one_line_before_any_server_starts(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    assert message in one_usage_error(run(pytester))


def test_a_url_template_with_version_is_accepted(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("LEAKCHECK_PGBOUNCER_URL", "file:///srv/mirror/pgbouncer-{version}.tar.gz")
    monkeypatch.setenv("LEAKCHECK_PGBOUNCER_TARBALLS", str(tmp_path))
    monkeypatch.setenv("LEAKCHECK_RUN_AS", "")  # blank counts as unset
    result = run(pytester, "--help")
    assert result.ret == pytest.ExitCode.OK


# --- the `leakcheck` command ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["prepare", "--pg="], "--pg is given but empty"),
        (["prepare", "--bouncer=1.2٤"], "--bouncer='1.2٤' is not valid"),
        (["prepare", "--backend=k8s"], "--backend='k8s' is not valid"),
        (["prepare", "--nope"], "unrecognized arguments: --nope"),
        ([], "the following arguments are required"),
    ],
)
def test_the_command_stops_on_bad_input_with_one_line_and_exit_code_4(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    from leakcheck.cli.main import main

    code: object
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 4 and err.count("\n") == 1 and err.startswith("leakcheck: error: ") and message in err


def test_the_command_checks_the_environment_before_fetching_anything(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from leakcheck.cli.main import main

    monkeypatch.setenv("LEAKCHECK_RUN_AS", "leakcheck-no-such-user")
    assert main(["prepare", "--pg=16", "--bouncer=1.24"]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "LEAKCHECK_RUN_AS='leakcheck-no-such-user' is not a user" in err


def test_an_environment_variable_of_only_spaces_is_refused(pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEAKCHECK_CACHE", "  ")
    assert "LEAKCHECK_CACHE='  ' is only spaces" in one_usage_error(run(pytester))


@pytest.mark.servers
def test_an_option_left_out_takes_its_default(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--pg=16", "--drivers=psycopg", "--probes=timezone", "--controls=no",
                                          "--collect-only", "-q")
    result.stdout.fnmatch_lines(["leakcheck::test_leak?pg16.*-pgbouncer1.26.*-psycopg*-timezone?"])
