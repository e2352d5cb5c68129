"""Driver settings as matrix axes (--driver-set), pure: parsing, checks, cells, ids, gate keys,
baselines, the diff and the advice about workarounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from leakcheck.config.config import Config
from leakcheck.config.diff_sides import parse_side
from leakcheck.config.matrix_file import parse
from leakcheck.drivers.settings import cell_settings, known_settings, native_values
from leakcheck.gate.baseline import Expectation, parse_text, render_toml
from leakcheck.gate.expectations import any_driver_version, key, lookup
from leakcheck.gate.expectations import parse as parse_baseline
from leakcheck.model.axes import DriverAxis, parse_driver_axis
from leakcheck.model.errors import UsageError
from leakcheck.model.target import Driver, Route
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.model.versions import Version
from leakcheck.reports.diff import compare, settings_notes
from leakcheck.reports.html import render_html
from leakcheck.reports.markdown import md_text, render_markdown
from leakcheck.reports.terminal import render_matrix
from leakcheck.reports.workarounds import workarounds
from leakcheck.run.matrix import driver_cells
from tests.pure.outcomes import make


def cfg(*sets: str, drivers: str = "psycopg,asyncpg") -> Config:
    return Config.from_strings({"leakcheck_pg": "16", "leakcheck_drivers": drivers,
                                "leakcheck_driver_set": "\n".join(sets) or None})


def at(bouncer: str, probe: str, verdict: Verdict, driver: str = "psycopg",
       settings: tuple[tuple[str, str], ...] = ()) -> Outcome:
    return make(probe, "16.14", bouncer, Route.TRANSACTION, driver, verdict, f"{probe} {settings}",
                driver_version="3.3.9", driver_settings=settings)


NONE = (("prepare_threshold", "None"),)

# --- parsing and checks ------------------------------------------------------------------------------


def test_a_driver_axis_names_its_driver_setting_and_values() -> None:
    assert parse_driver_axis("pgjdbc:prepareThreshold=0, 5,0") == DriverAxis("pgjdbc", "prepareThreshold", ("0", "5"))


@pytest.mark.parametrize("raw", ["prepareThreshold=0", "pgjdbc:prepareThreshold", "pgjdbc:=1", "pgjdbc:x=",
                                 "pgjdbc:currentSchema=a/b", 'pgjdbc:currentSchema="a,b"'])
def test_a_malformed_driver_axis_is_a_one_line_error(raw: str) -> None:
    with pytest.raises(UsageError, match="--driver-set"):
        parse_driver_axis(raw)


def test_an_unknown_setting_is_an_error_listing_the_drivers_known_ones() -> None:
    with pytest.raises(UsageError, match="pgjdbc has no setting 'prepare_threshold'; its settings are: "
                                         "prepareThreshold, preferQueryMode"):
        cfg("pgjdbc:prepare_threshold=0", drivers="pgjdbc")


def test_a_value_psycopg_would_refuse_is_an_error_before_any_server_starts() -> None:
    with pytest.raises(UsageError, match="prepare_threshold=never.*or None"):
        cfg("psycopg:prepare_threshold=never")


def test_a_setting_of_a_driver_the_run_does_not_drive_is_an_error() -> None:
    with pytest.raises(UsageError, match="pgjdbc is not among --drivers"):
        cfg("pgjdbc:prepareThreshold=0")


def test_a_driver_setting_given_twice_is_an_error() -> None:
    with pytest.raises(UsageError, match="given as an axis twice"):
        cfg("asyncpg:statement_cache_size=0", "asyncpg:statement_cache_size=100")


def test_every_shipped_agent_lists_the_settings_it_takes_with_defaults() -> None:
    assert dict(known_settings("pgjdbc"))["prepareThreshold"] == "5"
    assert dict(known_settings("psycopg")) == {"prepare_threshold": "5", "prepared_max": "100"}
    assert native_values("psycopg", NONE) == {"prepare_threshold": None}
    assert native_values("asyncpg", (("statement_cache_size", "0"),)) == {"statement_cache_size": 0}


def test_a_matrix_file_gives_driver_settings_as_the_option_does(tmp_path: Path) -> None:
    raw = parse({"pg": "16", "driver_settings": {"psycopg": {"prepare_threshold": ["None", "5"]}}}, tmp_path, "m")
    assert raw["leakcheck_driver_set"] == "psycopg:prepare_threshold=None,5"
    assert Config.from_strings(raw).driver_axes == (DriverAxis("psycopg", "prepare_threshold", ("None", "5")),)


# --- cells, ids, keys, baselines ----------------------------------------------------------------------


def test_settings_are_crossed_and_the_defaults_leave_the_id_unchanged() -> None:
    config = cfg("psycopg:prepare_threshold=None,5", "psycopg:prepared_max=100,10")
    cells = driver_cells(config.drivers, config.driver_axes, lambda d: None)
    assert [(d.value, s) for d, _, s in cells] == [
        ("psycopg", (("prepare_threshold", "None"),)),
        ("psycopg", (("prepare_threshold", "None"), ("prepared_max", "10"))),
        ("psycopg", ()), ("psycopg", (("prepared_max", "10"),)), ("asyncpg", ())]
    assert cell_settings("pdo", (("ATTR_EMULATE_PREPARES", "FALSE"),)) == ()


def test_a_cells_driver_settings_appear_in_its_test_id_and_gate_key() -> None:
    tuned = make("protocol_prepare", "16.14", "1.24.1", Route.TRANSACTION, "pgjdbc", Verdict.ISOLATED, "e",
                 driver_version="42.5.5", driver_settings=(("prepareThreshold", "0"),))
    assert tuned.target.test_id("protocol_prepare") == (
        "pg16.14-pgbouncer1.24.1-pgjdbc42.5.5[prepareThreshold=0]-protocol_prepare")
    assert key(tuned) == "pg16/pgbouncer1.24/pgjdbc42.5[prepareThreshold=0]/protocol_prepare"
    assert any_driver_version(key(tuned)) == "pg16/pgbouncer1.24/pgjdbc[prepareThreshold=0]/protocol_prepare"
    assert key(at("1.24.1", "protocol_prepare", Verdict.ISOLATED)) == "pg16/pgbouncer1.24/psycopg3.3/protocol_prepare"


def test_a_baseline_keeps_driver_settings_in_the_driver_tables_key_and_reads_back() -> None:
    entries = {key(at("1.18.0", "protocol_prepare", Verdict.NOT_APPLICABLE, settings=NONE)):
               Expectation(Verdict.NOT_APPLICABLE, "our workaround"),
               key(at("1.18.0", "protocol_prepare", Verdict.BREAKS)): Expectation(Verdict.BREAKS)}
    text = render_toml(entries)
    assert '["pg16/pgbouncer1.18"."psycopg3.3[prepare_threshold=None]"]' in text
    assert parse_text(text) == entries
    assert parse_baseline(text, "b", "fix it") == entries  # the keys are well-formed


def test_a_baseline_without_driver_settings_holds_only_the_defaults_cell() -> None:
    expected = {"pg16/pgbouncer1.18/psycopg/protocol_prepare": Expectation(Verdict.BREAKS)}
    assert lookup(at("1.18.0", "protocol_prepare", Verdict.BREAKS), expected) == Expectation(Verdict.BREAKS)
    assert lookup(at("1.18.0", "protocol_prepare", Verdict.NOT_APPLICABLE, settings=NONE), expected) is None


# --- the diff and the advice --------------------------------------------------------------------------

RUN = [at(b, p, v, settings=s) for b, verdicts in
       (("1.18.0", (Verdict.BREAKS, Verdict.LEAKS)), ("1.24.1", (Verdict.ISOLATED, Verdict.ISOLATED)))
       for s, vs in ((NONE, (Verdict.NOT_APPLICABLE, Verdict.NOT_APPLICABLE)), ((), verdicts))
       for p, v in zip(("protocol_prepare", "protocol_prepare_moved"), vs, strict=True)]


def test_a_diff_cell_may_name_a_driver_and_its_settings() -> None:
    cell = parse_side("pg16/pgbouncer1.24[max_prepared_statements=200]/psycopg[prepare_threshold=None]")
    assert (cell.settings, cell.driver, cell.driver_settings) == (
        (("max_prepared_statements", "200"),), "psycopg", NONE)
    assert parse_side("pg16/pgbouncer1.24/psycopg[prepare_threshold=5]").driver_settings == ()  # the default


def test_a_diff_between_two_driver_settings_on_one_cell_says_whether_the_workaround_is_needed() -> None:
    before, after = parse_side("pg16/pgbouncer1.24/psycopg[prepare_threshold=None]"), parse_side("pg16/pgbouncer1.24")
    changes, same = compare(RUN, before, after)
    assert [(c.probe, c.before and c.before.verdict, c.after and c.after.verdict) for c in changes] == [
        ("protocol_prepare", Verdict.NOT_APPLICABLE, Verdict.ISOLATED),
        ("protocol_prepare_moved", Verdict.NOT_APPLICABLE, Verdict.ISOLATED)]
    assert settings_notes(RUN, before, after) == [
        "pg16.14/pgbouncer1.24.1/psycopg3.3.9: prepare_threshold=None is no longer needed: protocol_prepare, "
        "protocol_prepare_moved are isolated with prepare_threshold=5 (the default) too"]


def test_the_advice_says_which_cell_needs_the_workaround_and_which_no_longer_does() -> None:
    said = workarounds(RUN)
    assert said[0] == ("pg16.14/pgbouncer1.18.0/psycopg3.3.9: prepare_threshold=None is needed: with "
                       "prepare_threshold=5 (the default) protocol_prepare breaks, protocol_prepare_moved leaks; "
                       "with prepare_threshold=None they are not_applicable")
    assert said[1].startswith("pg16.14/pgbouncer1.24.1/psycopg3.3.9: prepare_threshold=None is no longer needed")
    assert said[1] in render_matrix(RUN) and md_text(said[1]) in render_markdown(RUN)
    assert 'data-testid="workarounds"' in render_html(RUN) and 'data-testid="workarounds"' not in render_html(RUN[:2])


def test_a_workaround_that_does_not_help_is_said_to_be_not_enough() -> None:
    run = [at("1.18.0", "protocol_prepare", Verdict.BREAKS), at("1.18.0", "protocol_prepare", Verdict.BREAKS,
                                                                settings=(("prepared_max", "10"),))]
    assert workarounds(run) == ["pg16.14/pgbouncer1.18.0/psycopg3.3.9: prepared_max=10 changes nothing that the "
                                "default gets wrong (not enough for protocol_prepare, breaks with it too)"]


def test_no_advice_on_workarounds_without_a_measured_default_cell() -> None:
    assert workarounds([at("1.18.0", "protocol_prepare", Verdict.NOT_APPLICABLE, settings=NONE),
                        at("1.18.0", "protocol_prepare", Verdict.ERROR)]) == []
    assert Driver("psycopg").native and Version.parse("3.3") < Version.parse("3.3.9")
