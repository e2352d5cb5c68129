"""Every input a run takes, gone over from the code's own lists (config/options.py's table as flags and as
ini keys, the matrix file's keys, the LEAKCHECK_* variables the package reads): a bad value of each is one
line and exit code 4 before any server starts. This tier's audit hook (tests/support/tier_guard.py) fails a
test that starts a server or fetches one, so an input that got past the checks fails here too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leakcheck.cli.main import main
from leakcheck.config import matrix_file, preflight
from leakcheck.config.options import FLAG_OPTIONS, LIST_OPTIONS, OPTIONS

ROOT = Path(__file__).resolve().parents[2]
#: With the controls (the default): --record and --update refuse --controls=no before they check their paths.
SMALL = ["--pg=16", "--bouncer=1.24", "--drivers=psycopg", "--probes=timezone"]
DSN = ["--pooled-dsn=postgresql://u@127.0.0.1:1/db", "--direct-dsn=postgresql://u@127.0.0.1:2/db", "--drivers=psycopg",
       "--probes=timezone", "--controls=no"]

#: A bad value for each option (the test below fails for an option of the table missing here).
BAD = {
    "--pg": "sixteen", "--bouncer": "one", "--matrix": "/nonexistent/m.toml", "--diff": "nonsense",
    "--pooler": "nosuch:1", "--bouncer-fleet": "9", "--bouncer-ini": "/nonexistent/p.ini", "--pooled-dsn": "mysql://x",
    "--direct-dsn": "mysql://x", "--dsn-name": " ", "--drivers": "perl", "--probes": "nope", "--controls": "maybe",
    "--backend": "cloud", "--expect": "/nonexistent/e.toml", "--require": "nope", "--record": "/proc/x.toml",
    "--results": "/proc/x.json", "--report-html": "/proc/x.html", "--report-md": "/proc/x.md", "--jobs": "0",
    "--pg-image": "bad image", "--bouncer-image": "bad image", "--odyssey-image": "bad image",
    "--pgpool-image": "bad image", "--bouncer-set": "nosuchsetting", "--pooler-set": "x",
    "--driver-set": "psycopg:nosuch=1", "--update": "maybe", "--pairs": "pgjdbc+",
}
#: Options that only go with --pooled-dsn (their bad value is tried there).
WITH_DSN = ("--direct-dsn", "--dsn-name")
TABLE = ([(flag, ini) for flag, ini, *_ in OPTIONS] + [(flag, ini) for flag, ini, _ in LIST_OPTIONS]
         + [(flag, ini) for flag, ini, _ in FLAG_OPTIONS])
#: A bad value for each top-level key of a matrix file.
BAD_MATRIX = {"pg": '"sixteen"', "drivers": '"perl"', "pairs": '["pgjdbc+perl"]', "probes": '"nope"',
              "controls": '"maybe"', "expect": '"/nonexistent/e.toml"', "record": '"/proc/x.toml"', "require": '"nope"',
              "backend": '"cloud"', "results": '"/proc/x.json"', "jobs": '"0"'}
#: A bad value for each LEAKCHECK_* variable the package reads.
BAD_ENV = {"LEAKCHECK_CACHE": "/proc/leakcheck-cache", "LEAKCHECK_RUN_AS": "no-such-user-here",
           "LEAKCHECK_PGBOUNCER_TARBALLS": "/nonexistent/tarballs", "LEAKCHECK_PGBOUNCER_URL": "ftp://mirror/x",
           "LEAKCHECK_PGBOUNCER_BASE_IMAGE": "bad image", "LEAKCHECK_TIMINGS": "/proc/x/timings.json"}


def one_line_exit_4(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors (a flag given a value), exit code 4 as well
        code = exc.code
    captured = capsys.readouterr()
    assert code == 4, captured.out + captured.err
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("leakcheck: error: "), lines
    assert captured.out == ""  # nothing ran, so nothing was reported
    return lines[0]


@pytest.mark.parametrize(("flag", "ini"), TABLE, ids=[flag for flag, _ in TABLE])
def test_a_bad_value_of_every_option_is_one_line_before_any_server_starts(
        flag: str, ini: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert flag in BAD, f"{flag} is in config/options.py's table: give it a bad value here"
    monkeypatch.chdir(tmp_path)
    line = one_line_exit_4(["run", *(DSN if flag in WITH_DSN else SMALL), f"{flag}={BAD[flag]}"], capsys)
    assert flag in line or ini in line or flag == "--matrix" or "--pooled-dsn" in line, line


@pytest.mark.parametrize(("flag", "ini"), TABLE, ids=[ini for _, ini in TABLE])
def test_a_bad_value_of_every_ini_key_is_one_line_before_any_server_starts(
        flag: str, ini: str, pytester: pytest.Pytester) -> None:
    base = {"leakcheck_pg": "16", "leakcheck_bouncer": "1.24", "leakcheck_drivers": "psycopg",
            "leakcheck_probes": "timezone"}
    if flag in WITH_DSN:
        del base["leakcheck_pg"], base["leakcheck_bouncer"]
        base["leakcheck_pooled_dsn"] = "postgresql://u@127.0.0.1:1/db"
        base["leakcheck_direct_dsn"] = "postgresql://u@127.0.0.1:2/db"
    lines = "".join(f"{key} = {value}\n" for key, value in {**base, ini: BAD[flag]}.items())
    pytester.makeini(f"[pytest]\n{lines}")
    pytester.makeconftest("")
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("ERROR: "), errors
    assert "test_leak" not in result.stdout.str()


def test_the_matrix_files_keys_are_the_ones_gone_over() -> None:
    assert set(matrix_file._SCALARS) == set(BAD_MATRIX)


@pytest.mark.parametrize("key", sorted([*BAD_MATRIX, "pooler", "driver_settings"]))
def test_a_bad_value_of_every_matrix_file_key_is_one_line_before_any_server_starts(
        key: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    body = {"pooler": '[[pooler]]\nkind = "nosuch"\nversions = ["1"]\n',
            "driver_settings": '[driver_settings]\npsycopg = { nosuch = ["1"] }\n'}.get(key)
    text = 'pg = "16"\ndrivers = "psycopg"\nprobes = "timezone"\n'
    text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith(f"{key} ="))
    pooler = '[[pooler]]\nkind = "pgbouncer"\nversions = ["1.24"]\n'
    text += f"{key} = {BAD_MATRIX[key]}\n" if body is None else ""
    text += (pooler if key != "pooler" else "") + (body or "")
    (tmp_path / "m.toml").write_text(text)
    one_line_exit_4(["run", f"--matrix={tmp_path / 'm.toml'}"], capsys)


#: Variables leakcheck sets for its children and never reads as input (LEAKCHECK_AGENT: provision/host/tagged.py).
WRITTEN_ONLY = {"LEAKCHECK_AGENT"}


def test_every_leakcheck_variable_the_package_reads_is_checked_in_preflight() -> None:
    read = {m for path in (ROOT / "leakcheck").rglob("*.py")
            for m in re.findall(r'"(LEAKCHECK_[A-Z_]+)"', path.read_text(encoding="utf-8"))} - WRITTEN_ONLY
    assert read <= set(preflight.ENVIRONMENT), f"read but not checked: {sorted(read - set(preflight.ENVIRONMENT))}"
    assert set(preflight.ENVIRONMENT) == set(BAD_ENV)


@pytest.mark.parametrize("name", sorted(BAD_ENV))
def test_a_bad_value_of_every_leakcheck_variable_is_one_line_before_any_server_starts(
        name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, BAD_ENV[name])
    assert name in one_line_exit_4(["run", *SMALL], capsys)


OUTPUTS = ("--record", "--results", "--report-html", "--report-md", "--junitxml")


@pytest.mark.parametrize("under", [False, True], ids=["the-file", "a-folder-above"])
@pytest.mark.parametrize("flag", OUTPUTS)
def test_a_symlink_loop_as_an_output_path_is_one_line_and_exit_4(
        flag: str, under: bool, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("loop").symlink_to("loop")
    line = one_line_exit_4(["run", *SMALL, f"{flag}={'loop/out.x' if under else 'loop'}"], capsys)
    assert flag in line and "symlink loop" in line, line


@pytest.mark.parametrize("flag", OUTPUTS)
def test_a_folder_above_an_output_that_is_a_link_to_nothing_is_one_line_and_exit_4(
        flag: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("gone").symlink_to("missing/folder")  # creating the folder there would fail only at the end
    line = one_line_exit_4(["run", *SMALL, f"{flag}=gone/out.x"], capsys)
    assert flag in line and "gone is a symlink to a missing path" in line, line


@pytest.mark.parametrize("flag", OUTPUTS)
def test_a_symlink_loop_as_an_output_path_is_one_line_under_pytest_too(flag: str, pytester: pytest.Pytester) -> None:
    Path(pytester.path / "loop").symlink_to("loop")
    pytester.makeconftest("")
    result = pytester.runpytest_inprocess(*SMALL, f"{flag}=loop")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1 and "symlink loop" in errors[0], errors
