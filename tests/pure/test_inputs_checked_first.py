"""Inputs that would make a run mislead, refused before it starts (an output over another file, a gate
on a probe it does not measure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from leakcheck.cli.main import main
from leakcheck.config.config import Config
from leakcheck.config.distinct_paths import EXPECT, check_own_files
from leakcheck.model.errors import UsageError


def test_a_report_on_the_baseline_is_refused_before_anything_runs(tmp_path: Path) -> None:
    baseline = tmp_path / "b.json"
    baseline.write_text("{}")
    with pytest.raises(UsageError, match=r"--report-md=.*b\.json is the --expect baseline"):
        Config.from_strings({"leakcheck_pg": "16", "leakcheck_expect": str(baseline),
                             "leakcheck_report_md": str(tmp_path / "." / "b.json")})


def test_two_outputs_on_one_path_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--results=.*new.json is the file --record writes"):
        Config.from_strings({"leakcheck_pg": "16", "leakcheck_record": str(tmp_path / "new.json"),
                             "leakcheck_results": str(tmp_path / "new.json")})
    with pytest.raises(UsageError, match="--junitxml=.*is the file --report-html writes"):
        Config.from_strings({"leakcheck_pg": "16", "leakcheck_report_html": str(tmp_path / "r"),
                             "leakcheck_results": None}, junitxml=str(tmp_path / "r"))


def test_update_may_rewrite_its_own_baseline_and_nothing_else(tmp_path: Path) -> None:
    check_own_files({"--record": tmp_path / "b.json"}, {EXPECT: tmp_path / "b.json"},
                    may_rewrite=("--record", EXPECT))
    with pytest.raises(UsageError, match="--report-md"):
        check_own_files({"--record": tmp_path / "b.json", "--report-md": tmp_path / "b.json"},
                        {EXPECT: tmp_path / "b.json"}, may_rewrite=("--record", EXPECT))


def test_a_symlink_to_an_input_is_the_same_file(tmp_path: Path) -> None:
    (tmp_path / "team.ini").write_text("[pgbouncer]\n")
    (tmp_path / "link.html").symlink_to(tmp_path / "team.ini")
    with pytest.raises(UsageError, match="the --bouncer-ini file"):
        check_own_files({"--report-html": tmp_path / "link.html"}, {"the --bouncer-ini file": tmp_path / "team.ini"})


def test_a_required_probe_the_run_does_not_measure_is_refused() -> None:
    with pytest.raises(UsageError, match="--require=search_path names search_path, which --probes does not run"):
        Config.from_strings({"leakcheck_pg": "16", "leakcheck_probes": "timezone", "leakcheck_require": "search_path"})
    with pytest.raises(UsageError, match="--require: unknown probe id"):
        Config.from_strings({"leakcheck_pg": "16", "leakcheck_require": "nope"})
    settings = Config.from_strings({"leakcheck_pg": "16", "leakcheck_probes": "timezone,read_only",
                                    "leakcheck_require": "security"})
    assert settings.require is not None and "read_only" in settings.require


@pytest.mark.parametrize("argv", [
    ["run", "--pg=15", "--bouncer=1.24", "--probes=timezone"],
    ["run", "--pg=16,9.6", "--bouncer=1.24"],
    ["prepare", "--pg=15.18"],
    ["run", "--diff=pg15/pgbouncer1.24..pg16/pgbouncer1.24"],
])
def test_a_postgresql_older_than_16_is_one_line_and_exit_4_before_any_server_starts(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # Before, --pg=15 was fetched and started, and every test failed on the probes' roles (exit 1).
    assert main(argv) == 4
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "is older than 16, the oldest leakcheck measures" in err[0], err


def test_a_path_to_a_postgresql_older_than_16_is_one_line_and_exit_4(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bindir = tmp_path / "pg15" / "bin"
    bindir.mkdir(parents=True)
    for name in ("postgres", "initdb"):  # stand-ins that only answer --version, as PostgreSQL 15 does
        (bindir / name).write_text(f"#!/bin/sh\necho '{name} (PostgreSQL) 15.18'\n")
        (bindir / name).chmod(0o755)
    assert main(["run", f"--pg={bindir}", "--bouncer=1.24", "--probes=timezone"]) == 4
    err = capsys.readouterr().err
    assert f"--pg={bindir}: PostgreSQL 15.18 is older than 16" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("argv", "said"), [
    (["--probes=serach_path,timezone"], "--probes: unknown probe id(s) serach_path (did you mean search_path or search_path_emptied?);"),
    (["--require=securty"], "--require: unknown probe id(s) securty (did you mean security?);"),
], ids=["probes", "require"])
def test_a_probe_id_typo_is_one_short_line_with_the_closest_ids_not_every_id(
        argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--pg=16", *argv]) == 4
    err = capsys.readouterr().err.strip()
    assert said in err and len(err) < 200, err  # it listed all 49 ids (919 characters) and no guess
