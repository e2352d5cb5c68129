"""The upgrade gate end to end: accepted leaks, differences both ways, --update (also under xdist),
--require, and `leakcheck run` giving the plugin's answer without pytest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from leakcheck.gate import expectations
from leakcheck.gate.baseline import Expectation
from leakcheck.model.verdicts import Verdict

pytestmark = pytest.mark.servers

SMALL = ["--pg=16", "--bouncer=1.24", "--drivers=psycopg", "--probes=statement_timeout,timezone", "--controls=no"]
#: --record and --update write a verdict only where its controls passed in the same run: they run them.
RECORDING = SMALL[:-1]


def keys(path: Path) -> dict[str, Expectation]:
    return {k.rsplit("/", 1)[-1]: v for k, v in expectations.load(path).items()}


def recorded(pytester: pytest.Pytester, name: str = "prod.toml") -> Path:
    pytester.runpytest_inprocess(*RECORDING, f"--record={name}")
    return pytester.path / name


def test_an_accepted_leak_passes_as_an_expected_failure_with_its_reason(pytester: pytest.Pytester) -> None:
    path = recorded(pytester)
    text = path.read_text().replace('statement_timeout = "leaks"',
                                    'statement_timeout = { verdict = "leaks", reason = "we set it per transaction" }')
    path.write_text(text)
    result = pytester.runpytest_inprocess(*SMALL, f"--expect={path}", "-rx")
    result.assert_outcomes(passed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*XFAIL*statement_timeout* - leaks, as the baseline expects (we set it per "
                                 "transaction): A: SET statement_timeout*"])
    assert result.ret == pytest.ExitCode.OK


def test_an_accepted_leaks_report_is_its_message_without_a_traceback(pytester: pytest.Pytester) -> None:
    # pytest's traceback of each xfail parsed the plugin's source anew: 568 accepted leaks took 60 s of the gate
    result = pytester.runpytest_inprocess(*SMALL, f"--expect={recorded(pytester)}")
    result.assert_outcomes(passed=1, xfailed=1)
    [accepted] = [r for r in result.reprec.getreports("pytest_runtest_logreport")  # type: ignore[attr-defined]
                  if hasattr(r, "wasxfail")]
    assert str(accepted.longrepr).startswith("leaks, as the baseline expects"), accepted.longrepr
    assert "runtest" not in str(accepted.longrepr), accepted.longrepr


def test_a_new_leak_and_a_vanished_leak_both_fail(pytester: pytest.Pytester) -> None:
    path = recorded(pytester)
    text = path.read_text()
    path.write_text(text.replace('statement_timeout = "leaks"', 'statement_timeout = "isolated"')
                    .replace('timezone = "isolated"', 'timezone = "leaks"'))
    result = pytester.runpytest_inprocess(*SMALL, f"--expect={path}")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "new leaks: expected isolated, measured leaks" in out and "the expected leaks went away" in out


@pytest.mark.parametrize("parallel", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_update_rewrites_the_baseline_once_keeping_reasons_and_then_it_passes(
    pytester: pytest.Pytester, parallel: list[str]
) -> None:
    path = recorded(pytester)
    text = path.read_text().replace('statement_timeout = "leaks"',
                                    'statement_timeout = { verdict = "leaks", reason = "accepted" }')
    path.write_text(text.replace('timezone = "isolated"', 'timezone = "leaks"'))  # wrong on purpose
    updated = pytester.runpytest_inprocess(*RECORDING, f"--expect={path}", "--update", *parallel)
    assert updated.ret == pytest.ExitCode.OK  # differences are recorded, not failed
    assert updated.stdout.str().count(f"leakcheck: recorded 2 verdicts in {path}") == 1
    assert keys(path) == {"statement_timeout": Expectation(Verdict.LEAKS, "accepted"),
                          "timezone": Expectation(Verdict.ISOLATED)}
    again = pytester.runpytest_inprocess(*SMALL, f"--expect={path}", *parallel)
    again.assert_outcomes(passed=1, xfailed=1)


def test_update_needs_the_baseline_it_rewrites(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess(*SMALL, "--update")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--update rewrites the --expect baseline" in result.stderr.str()


def test_require_fails_only_on_the_probes_the_application_relies_on(pytester: pytest.Pytester) -> None:
    relied = pytester.runpytest_inprocess(*SMALL, "--require=timezone")
    relied.assert_outcomes(passed=1, xfailed=1)  # statement_timeout leaks, but nobody relies on it
    assert relied.ret == pytest.ExitCode.OK
    broken = pytester.runpytest_inprocess(*SMALL, "--require=statement_timeout")
    broken.assert_outcomes(passed=1, failed=1)
    assert "statement_timeout is required (--require) to be isolated, measured leaks" in broken.stdout.str()
    unknown = pytester.runpytest_inprocess(*SMALL, "--require=no_such_probe")
    assert unknown.ret == pytest.ExitCode.USAGE_ERROR


def test_leakcheck_run_gives_the_plugins_verdicts_and_exit_codes_without_pytest(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "leakcheck.cli.main", "run", *RECORDING, f"--results={tmp_path / 'r.json'}",
               f"--record={tmp_path / 'm.toml'}"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False)
    assert done.returncode == 1, done.stderr  # statement_timeout leaks
    assert "FAILED test_leak[pg16." in done.stdout and "statement_timeout]: LEAKS: " in done.stdout
    assert "leakcheck: [1/4] pg16." in done.stderr  # progress per cell on stderr (the pooler and three controls)
    assert keys(tmp_path / "m.toml")["timezone"] == Expectation(Verdict.ISOLATED)
    accepted = subprocess.run([*command[:4], *SMALL, f"--expect={tmp_path / 'm.toml'}"], capture_output=True,
                              text=True, cwd=tmp_path, timeout=300, check=False)
    assert accepted.returncode == 0, accepted.stdout
    bad = subprocess.run([*command[:4], "--pg=16", "--drivers=perl"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60, check=False)
    assert bad.returncode == 4 and len(bad.stderr.splitlines()) == 1 and "--drivers" in bad.stderr
