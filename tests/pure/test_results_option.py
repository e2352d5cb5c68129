"""--results: a bad path stops the run before any server starts (exit code 4, one `ERROR:` line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.servers.test_bad_input import SMALL, one_usage_error


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("--results=", "--results is given but empty"),
        ("--results=.", "--results: . is a folder"),
        ("--results=conftest.py", "--results: conftest.py exists and is not a leakcheck results file; move it away"),
        ("--results=conftest.py/r.json", "is a file; give --results another path"),
    ],
)
def test_a_bad_results_path_is_one_line_and_exit_code_4(pytester: pytest.Pytester, arg: str, message: str) -> None:
    pytester.makeconftest("")
    assert message in one_usage_error(pytester.runpytest_inprocess(*SMALL, arg))
    assert (pytester.path / "conftest.py").read_text() == ""


def test_the_results_ini_key_is_checked_too(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nleakcheck_results =\n")
    assert "--results is given but empty" in one_usage_error(pytester.runpytest_inprocess(*SMALL))


def test_results_without_the_matrix_is_refused(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--results=r.json")
    assert "--results given, but the leak matrix is off" in one_usage_error(result)
    assert not Path(pytester.path / "r.json").exists()
