"""`leakcheck discover --driver=... --driver-set DRIVER:NAME=V`: one value per setting (discover
searches one configuration), checked as the matrix checks it, and named wherever the findings are."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest

from leakcheck.discover import command, lab
from leakcheck.discover.report import script
from leakcheck.model.errors import UsageError
from leakcheck.model.target import Driver, Route
from leakcheck.model.versions import Version
from tests.pure.test_discover_report import PREPARED


def _options(driver: str, *settings: str) -> command.o.Options:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    given = ["--pg=16", "--bouncer=1.24", f"--driver={driver}", "--database=none", "--out=none"]
    return command.options(parser.parse_args([*given, *(f"--driver-set={s}" for s in settings)]))


def test_a_driver_setting_reaches_the_options_and_a_default_value_is_not_written() -> None:
    opts = _options("psycopg", "psycopg:prepare_threshold=None", "psycopg:prepared_max=100")
    assert opts.driver_settings == (("prepare_threshold", "None"),)
    assert opts.client == "psycopg[prepare_threshold=None]"


def test_without_driver_set_the_client_is_the_driver_alone() -> None:
    opts = _options("pgjdbc")
    assert (opts.driver_settings, opts.client) == ((), "pgjdbc")


@pytest.mark.parametrize(("settings", "message"), [
    (("pgjdbc:prepareThreshold=0,5",), "one value .*discover searches one configuration"),
    (("psycopg:prepare_threshold=None",), "psycopg is not --driver \\(pgjdbc\\)"),
    (("pgjdbc:prepare_threshold=0",), "pgjdbc has no setting 'prepare_threshold'; its settings are: prepareThreshold"),
    (("pgjdbc:prepareThreshold=0", "pgjdbc:prepareThreshold=5"), "prepareThreshold is given twice"),
    (("pgjdbc=prepareThreshold",), "DRIVER:NAME=V1,V2"),
])
def test_a_driver_setting_discover_cannot_search_is_one_line_before_any_server_starts(
        settings: tuple[str, ...], message: str) -> None:
    with pytest.raises(UsageError, match=message) as raised:
        _options("pgjdbc", *settings)
    assert "\n" not in str(raised.value)


def test_a_value_the_native_driver_would_refuse_is_refused_as_the_matrix_refuses_it() -> None:
    with pytest.raises(UsageError, match="psycopg:prepare_threshold=often.*a whole number"):
        _options("psycopg", "psycopg:prepare_threshold=often")


def test_a_findings_script_names_the_driver_with_its_settings() -> None:
    text = script(PREPARED, "PostgreSQL 16.14", Driver.PSYCOPG, 1, 2, "psycopg[prepare_threshold=None]")
    assert "; driver psycopg[prepare_threshold=None]; found in round 1" in text.splitlines()[1]


def test_the_files_and_example_keys_of_a_run_name_the_driver_settings() -> None:
    opts = _options("psycopg", "psycopg:prepare_threshold=None")
    where = SimpleNamespace(where=lab.LabRoute(Version.parse("16"), None, Route.DIRECT))
    assert command._stem(where, opts) == "pg16-psycopg_prepare_threshold=None-transaction"  # type: ignore[arg-type]


def test_the_results_file_and_the_summary_name_the_driver_with_its_settings(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from leakcheck.discover import results_file
    from leakcheck.discover.options import Options
    from tests.pure.test_discover_accept import NEW, Found

    Found(monkeypatch, [NEW])  # stand-ins for the lab and the search
    path = tmp_path / "findings.json"
    command.run(Options(cell=(("leakcheck_pg", "16"),), route=Route.DIRECT, budget=1.0, seed=1, results=path,
                        driver_settings=(("prepare_threshold", "None"),)))
    assert results_file.load(path, "--results").driver == "psycopg[prepare_threshold=None]"
    assert ", psycopg[prepare_threshold=None]: " in capsys.readouterr().out
