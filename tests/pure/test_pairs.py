"""Mixed applications on one pool (--pairs), pure: parsing and checks, the cells, ids, gate keys,
baselines, results files, merge, the diff and the reports; single-driver cells keep theirs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from leakcheck.cli.main import main
from leakcheck.config.config import Config
from leakcheck.config.diff_sides import parse_side
from leakcheck.config.matrix_file import parse as parse_matrix
from leakcheck.discover import command
from leakcheck.discover.ops import Who
from leakcheck.discover.report import DriverNames
from leakcheck.gate.baseline import Expectation, parse_text, render_toml
from leakcheck.gate.expectations import _KEY, any_driver_version, key, lookup
from leakcheck.gate.expectations import parse as parse_baseline
from leakcheck.model.axes import PairSide, parse_pairs
from leakcheck.model.errors import UsageError
from leakcheck.model.target import Application, Driver, Pooler, PoolerKind, Route, Target
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.model.versions import Version
from leakcheck.reports.diff import compare, render_markdown
from leakcheck.reports.terminal import render_matrix
from leakcheck.results import results
from leakcheck.results.results import Results, combine, from_properties, properties
from leakcheck.run.lanes import lane_of
from leakcheck.run.matrix import client_cells
from leakcheck.run.runner import ignored_startup, pool_settings, pooler_lane
from tests.pure.outcomes import make

PG = Version.parse("16.14")
BOUNCER = Pooler(PoolerKind.PGBOUNCER, Version.parse("1.24.1"))
PGJDBC = Application(Driver("pgjdbc"), Version.parse("42.5.5"))
PSYCOPG = Application(Driver("psycopg"), Version.parse("3.3.9"))
PRISMA_BOUNCER = Application(Driver("prisma"), Version.parse("7.10.1"), (("pgbouncer", "true"),))


def cfg(pairs: str, drivers: str | None = None, driver_set: str | None = None) -> Config:
    return Config.from_strings({"leakcheck_pg": "16", "leakcheck_pairs": pairs, "leakcheck_drivers": drivers,
                                "leakcheck_driver_set": driver_set})


def pair(a: Application, b: Application, route: Route = Route.TRANSACTION, pooler: Pooler | None = BOUNCER) -> Target:
    return Target(PG, pooler, route, a.driver, a.version, a.settings, b)


def outcome(target: Target, probe: str = "protocol_prepare", verdict: Verdict = Verdict.BREAKS) -> Outcome:
    return Outcome(probe, target, verdict, f"{probe} on {target.client}")


# --- parsing and checks ------------------------------------------------------------------------------


def test_pairs_name_each_sides_driver_and_its_own_settings_in_brackets() -> None:
    assert parse_pairs(" pgjdbc+psycopg , prisma[pgbouncer=true, options=-c a=b]+node-postgres,pgjdbc+psycopg") == (
        (PairSide("pgjdbc"), PairSide("psycopg")),
        (PairSide("prisma", (("pgbouncer", "true"), ("options", "-c a=b"))), PairSide("node-postgres")))


def test_a_config_with_pairs_alone_runs_the_pairs_only_and_with_drivers_both() -> None:
    alone = cfg("pgjdbc+psycopg,prisma[pgbouncer=true]+node-postgres")
    assert alone.drivers == ()
    assert alone.pairs == ((Application(Driver("pgjdbc")), Application(Driver("psycopg"))),
                           (Application(Driver("prisma"), None, (("pgbouncer", "true"),)),
                            Application(Driver("node-postgres"))))
    assert cfg("pgjdbc+psycopg", drivers="asyncpg").drivers == (Driver("asyncpg"),)


def test_a_sides_default_settings_are_not_written_so_that_pair_is_the_plain_one() -> None:
    assert cfg("prisma[pgbouncer=false]+node-postgres").pairs == (
        (Application(Driver("prisma")), Application(Driver("node-postgres"))),)


@pytest.mark.parametrize(("raw", "said"), [
    ("pgjdbc", "is not two drivers joined by '+'"),
    ("pgjdbc+psycopg+asyncpg", "is not two drivers joined by '+'"),
    ("pgjdbc+psycopg,,asyncpg+pdo", "an empty item"),
    ("pgjdbc+", "an empty side"),
    ("perl+psycopg", "'perl' is no driver"),
    ("prisma[pgbouncer]+psycopg", "a setting is NAME=VALUE"),
    ("prisma[pgbouncer=true+psycopg", "is not two drivers joined by '+'"),
    ("prisma]+psycopg", "is not a driver with optional"),
    ("prisma[pgbouncer=a/b]+psycopg", "a setting is NAME=VALUE"),
    ("prisma[pgbouncer=true,pgbouncer=false]+psycopg", "pgbouncer is given twice"),
    ("pgjdbc[nosuch=1]+psycopg", "pgjdbc has no setting 'nosuch'"),
    ("psycopg[prepare_threshold=x]+pgjdbc", "a whole number"),
    ("psycopg+psycopg", "runs one application on both sides"),
    ("psycopg[prepare_threshold=5]+psycopg", "runs one application on both sides"),
])
def test_a_bad_pair_is_one_line_and_exit_4_before_any_server_starts(raw: str, said: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--pg=16", "--bouncer=1.24", f"--pairs={raw}", "--probes=timezone", "--controls=no"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 4 and len(err) == 1 and err[0].startswith("leakcheck: error: --pairs"), err
    assert said in err[0], err


def test_a_driver_set_of_a_driver_only_paired_says_where_its_settings_go() -> None:
    with pytest.raises(UsageError, match=r"not among --drivers \(none\).*--pairs=pgjdbc\[prepareThreshold=0\]"):
        cfg("pgjdbc+psycopg", driver_set="pgjdbc:prepareThreshold=0,5")


def test_a_matrix_file_gives_pairs_as_the_option_does_settings_commas_and_all() -> None:
    raw = parse_matrix({"pg": "16", "pairs": ["pgjdbc+psycopg", "prisma[pgbouncer=true,options=x]+pdo"]},
                       Path("."), "m.toml")
    assert raw["leakcheck_pairs"] == "pgjdbc+psycopg,prisma[pgbouncer=true,options=x]+pdo"
    assert len(Config.from_strings(raw).pairs) == 2


# --- cells, ids, lanes -----------------------------------------------------------------------------


def test_a_pairs_cell_follows_the_drivers_cells_with_both_sides_at_their_releases() -> None:
    releases = {"psycopg": Version.parse("3.3.9"), "pgjdbc": Version.parse("42.5.5")}
    cells = client_cells(cfg("pgjdbc+psycopg", drivers="psycopg"), lambda d: releases.get(d.value))
    assert cells == [(Driver("psycopg"), releases["psycopg"], (), None),
                     (Driver("pgjdbc"), releases["pgjdbc"], (), PSYCOPG)]


def test_a_pairs_ids_columns_and_keys_name_both_applications_a_first() -> None:
    target = pair(PRISMA_BOUNCER, Application(Driver("node-postgres"), Version.parse("8.16.3")))
    assert target.client == "prisma7.10.1[pgbouncer=true]+node-postgres8.16.3"
    assert target.test_id("tx_cursor") == \
        "pg16.14-pgbouncer1.24.1-prisma7.10.1[pgbouncer=true]+node-postgres8.16.3-tx_cursor"
    assert target.column == "pg16.14/pgbouncer1.24.1/prisma7.10.1[pgbouncer=true]+node-postgres8.16.3"
    assert target.drivers == "prisma+node-postgres"
    gate_key = key(outcome(target))
    assert gate_key == "pg16/pgbouncer1.24/prisma7.10[pgbouncer=true]+node-postgres8.16/protocol_prepare"
    assert _KEY.fullmatch(gate_key)
    assert any_driver_version(gate_key) == "pg16/pgbouncer1.24/prisma[pgbouncer=true]+node-postgres/protocol_prepare"


def test_a_single_drivers_id_and_key_are_the_ones_they_were() -> None:
    target = Target(PG, BOUNCER, Route.TRANSACTION, Driver("pgjdbc"), Version.parse("42.5.5"))
    assert target.b is None and target.b_app == target.a_app and target.drivers == "pgjdbc"
    assert target.test_id("timezone") == "pg16.14-pgbouncer1.24.1-pgjdbc42.5.5-timezone"
    assert key(outcome(target)) == "pg16/pgbouncer1.24/pgjdbc42.5/protocol_prepare"


def test_a_pair_runs_on_a_pooler_process_of_its_own_told_to_ignore_both_sides_startup_parameters() -> None:
    from leakcheck.probes import PROBES

    probe = next(p for p in PROBES if p.id == "protocol_prepare")
    mixed, alone = pair(PSYCOPG, PGJDBC), Target(PG, BOUNCER, Route.TRANSACTION, Driver("psycopg"))
    assert pooler_lane(mixed) == "psycopg+pgjdbc/transaction" and pooler_lane(alone) == "psycopg/transaction"
    settings = pool_settings(probe, mixed)
    assert settings is not None and settings.ignored_startup == ignored_startup(Driver("pgjdbc")) != ()
    assert lane_of(probe, mixed) != lane_of(probe, alone)


# --- baselines ------------------------------------------------------------------------------------


def test_a_baseline_holds_a_pair_in_its_driver_tables_key_and_reads_back() -> None:
    entries = {key(outcome(pair(PGJDBC, PSYCOPG))): Expectation(Verdict.BREAKS, "accepted"),
               "pg16/pgbouncer1.24/psycopg3.3/timezone": Expectation(Verdict.ISOLATED)}
    text = render_toml(entries)
    assert '["pg16/pgbouncer1.24"."pgjdbc42.5+psycopg3.3"]' in text
    assert parse_baseline(text, "b.toml", "") == entries == parse_text(text)


def test_a_pairs_expectation_is_found_for_any_release_and_never_for_its_a_alone() -> None:
    got = outcome(pair(PGJDBC, PSYCOPG))
    expected = {"pg16/pgbouncer1.24/pgjdbc+psycopg/protocol_prepare": Expectation(Verdict.BREAKS),
                "pg16/pgbouncer1.24/pgjdbc/protocol_prepare": Expectation(Verdict.ISOLATED)}
    assert lookup(got, expected) == Expectation(Verdict.BREAKS)
    alone = outcome(Target(PG, BOUNCER, Route.TRANSACTION, Driver("pgjdbc"), Version.parse("42.5.5")))
    assert lookup(alone, expected) == Expectation(Verdict.ISOLATED)


# --- results files, merge --------------------------------------------------------------------------


def test_a_pair_round_trips_through_a_tests_properties() -> None:
    for target in (pair(PRISMA_BOUNCER, PSYCOPG), pair(PGJDBC, Application(Driver("pdo")), Route.SHARED, None)):
        got = outcome(target)
        assert from_properties(properties(got)) == got
    alone = outcome(Target(PG, BOUNCER, Route.TRANSACTION, Driver("psycopg")))
    assert not any(name.startswith("driver_b") for name, _ in properties(alone))


def test_a_results_file_with_a_pair_is_version_4_and_reads_back(tmp_path: Path) -> None:
    got = (outcome(pair(PRISMA_BOUNCER, PSYCOPG)), outcome(pair(PGJDBC, PSYCOPG), "tx_cursor", Verdict.ISOLATED),
           make("timezone", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.ISOLATED, "tz"))
    text = results.dumps(Results(got))
    data = json.loads(text)
    assert data["version"] == results.VERSION == 4
    by_driver = {o["driver"]: o.get("driver_b") for o in data["outcomes"]}
    assert by_driver == {"prisma": {"driver": "psycopg", "version": "3.3.9", "settings": []},
                         "pgjdbc": {"driver": "psycopg", "version": "3.3.9", "settings": []}, "psycopg": None}
    path = tmp_path / "r.json"
    path.write_text(text)
    assert set(results.load(path).outcomes) == set(got)


def test_a_results_file_of_version_3_still_reads_as_single_driver_cells() -> None:
    data = {"schema": "leakcheck-results", "version": 3, "outcomes": [
        {"probe": "timezone", "pg": "16.14", "pooler": None, "route": "direct", "driver": "psycopg",
         "driver_version": "3.3.9", "driver_settings": [], "verdict": "isolated", "facts": [], "security": False,
         "evidence": "e"}]}
    [read] = results.parse(data, "r.json").outcomes
    assert read.target.b is None and read.target.client == "psycopg3.3.9"


def test_merge_keeps_a_pair_apart_from_its_a_drivers_cell() -> None:
    alone = outcome(Target(PG, BOUNCER, Route.TRANSACTION, Driver("pgjdbc"), Version.parse("42.5.5")),
                    verdict=Verdict.ISOLATED)
    mixed = outcome(pair(PGJDBC, PSYCOPG))
    merged = combine([("one.json", Results((alone,))), ("two.json", Results((mixed,)))])
    assert set(merged.outcomes) == {alone, mixed}


# --- the diff and the reports ---------------------------------------------------------------------


def test_a_diff_cell_may_name_a_pair_and_compares_it_apart_from_single_drivers() -> None:
    cell = parse_side("pg16/pgbouncer1.24/prisma[pgbouncer=true]+node-postgres")
    assert (cell.driver, cell.driver_settings, cell.driver_b, cell.driver_b_settings) == (
        "prisma", (("pgbouncer", "true"),), "node-postgres", ())
    node = Application(Driver("node-postgres"), Version.parse("8.16.3"))
    before = outcome(pair(PRISMA_BOUNCER, node), verdict=Verdict.ISOLATED)
    after = outcome(pair(PRISMA_BOUNCER, node, pooler=Pooler(PoolerKind.PGBOUNCER, Version.parse("1.26.1"))))
    alone = outcome(Target(PG, BOUNCER, Route.TRANSACTION, Driver("prisma"), None, (("pgbouncer", "true"),)))
    to = parse_side("pg16/pgbouncer1.26/prisma[pgbouncer=true]+node-postgres")
    changes, same = compare([before, after, alone], cell, to)
    assert [(c.driver, c.before, c.after) for c in changes] == [("prisma+node-postgres", before, after)] and same == 0
    assert "| prisma+node-postgres |" in render_markdown(changes, same, cell, to)
    # a side without a driver means the other side's pair, at its defaults (as it means a driver)
    plain = parse_side("pg16/pgbouncer1.26").naming(cell)
    assert (plain.driver, plain.driver_b, plain.driver_settings) == ("prisma", "node-postgres", ())
    assert not plain.matches(after)
    assert not parse_side("pg16/pgbouncer1.24/prisma").matches(outcome(pair(PRISMA_BOUNCER, node)))


def test_the_terminal_matrix_shows_a_pair_in_a_column_of_its_own() -> None:
    alone = outcome(Target(PG, BOUNCER, Route.TRANSACTION, Driver("pgjdbc"), Version.parse("42.5.5")),
                    verdict=Verdict.ISOLATED)
    text = render_matrix([alone, outcome(pair(PGJDBC, PSYCOPG))], width=400)
    assert "(1) pgbouncer1.24.1/pgjdbc42.5.5\n" in text and "(2) pgbouncer1.24.1/pgjdbc42.5.5+psycopg3.3.9\n" in text


# --- discovery ------------------------------------------------------------------------------------


def _discover(*given: str) -> command.o.Options:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return command.options(parser.parse_args(["--pg=16", "--bouncer=1.24", "--database=none", "--out=none", *given]))


def test_discover_takes_one_pair_with_each_sides_settings() -> None:
    opts = _discover("--pair=prisma[pgbouncer=true]+node-postgres")
    assert (opts.driver, opts.driver_settings, opts.b) == (
        Driver("prisma"), (("pgbouncer", "true"),), Application(Driver("node-postgres")))
    assert opts.client == "prisma[pgbouncer=true]+node-postgres"
    assert _discover("--driver=pgjdbc").b is None


@pytest.mark.parametrize(("given", "said"), [
    (("--pair=psycopg+asyncpg", "--driver=pgjdbc"), "leave out --driver"),
    (("--pair=psycopg+asyncpg", "--driver-set=psycopg:prepare_threshold=None"), "leave out --driver-set"),
    (("--pair=psycopg+asyncpg,pgjdbc+pdo",), "one pair A+B"),
    (("--pair=psycopg",), "is not two drivers joined by '+'"),
    (("--pair=psycopg+asyncpg[nosuch=1]",), "asyncpg has no setting 'nosuch'"),
])
def test_a_pair_discover_cannot_search_is_one_line_before_any_server_starts(given: tuple[str, ...], said: str) -> None:
    with pytest.raises(UsageError) as caught:
        _discover(*given)
    assert "\n" not in str(caught.value) and said in str(caught.value) and "--pair" in str(caught.value)


def test_a_discovery_script_names_each_clients_statements_as_its_own_driver_does() -> None:
    names = DriverNames(Driver.PSYCOPG, Driver("pdo"))
    assert names.name(Who.A, "SELECT 1")[0] == "_pg3_0" and names.name(Who.B, "SELECT 1")[0] == "pdo_stmt_00000001"
