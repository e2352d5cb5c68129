"""Inputs that would make a run mislead, refused before it starts (an output over another file, a gate
on a probe it does not measure)."""

from __future__ import annotations

from pathlib import Path

import pytest

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
