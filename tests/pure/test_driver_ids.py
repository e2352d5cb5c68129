"""Driver ids: open to the agents, with psycopg's and asyncpg's ids as they always were."""

from __future__ import annotations

import pytest

from leakcheck.config.config import Config
from leakcheck.config.options import FLAGS
from leakcheck.model.errors import UsageError
from leakcheck.model.target import Driver, Pooler, PoolerKind, Route, Target
from leakcheck.model.versions import Version

PG, BOUNCER = Version.parse("16.14"), Pooler(PoolerKind.PGBOUNCER, Version.parse("1.24.1"))


def _config(drivers: str) -> Config:
    raw: dict[str, str | None] = dict.fromkeys(FLAGS)
    raw.update(leakcheck_pg="16", leakcheck_drivers=drivers)
    return Config.from_strings(raw)


def test_a_psycopg_cell_id_is_the_one_it_was() -> None:
    target = Target(PG, BOUNCER, Route.TRANSACTION, Driver("psycopg"), Version.parse("3.3.9"))
    assert target.test_id("timezone") == "pg16.14-pgbouncer1.24.1-psycopg3.3.9-timezone"
    assert Driver("psycopg") == Driver.PSYCOPG and Driver.PSYCOPG.value == "psycopg"


def test_an_agent_cell_id_names_the_driver_and_its_release() -> None:
    target = Target(PG, BOUNCER, Route.TRANSACTION, Driver("node-postgres"), Version.parse("8.23.1"))
    assert target.test_id("protocol_prepare") == "pg16.14-pgbouncer1.24.1-node-postgres8.23.1-protocol_prepare"
    assert not Driver("node-postgres").native


def test_drivers_takes_the_agents_ids() -> None:
    assert _config("node-postgres,postgres-js").drivers == (Driver("node-postgres"), Driver("postgres-js"))


def test_an_unknown_driver_is_one_line_listing_the_ids() -> None:
    with pytest.raises(UsageError) as caught:
        _config("psycopg,jdbc")
    assert "\n" not in str(caught.value)
    assert "psycopg, asyncpg, node-postgres, postgres-js" in str(caught.value)


def test_a_driver_id_ending_in_its_major_is_kept_apart_from_its_release_in_ids_and_keys() -> None:
    from leakcheck.gate.expectations import _KEY, any_driver_version, key
    from leakcheck.model.verdicts import Outcome, Verdict

    target = Target(PG, BOUNCER, Route.TRANSACTION, Driver("pgx-v5"), Version.parse("5.13.0"))
    assert target.test_id("timezone") == "pg16.14-pgbouncer1.24.1-pgx-v5-5.13.0-timezone"
    gate_key = key(Outcome("timezone", target, Verdict.ISOLATED, ""))
    assert gate_key == "pg16/pgbouncer1.24/pgx-v5-5.13/timezone" and _KEY.fullmatch(gate_key)
    assert any_driver_version(gate_key) == "pg16/pgbouncer1.24/pgx-v5/timezone"
    assert any_driver_version("pg16/pgbouncer1.24/pgjdbc42.5[prepareThreshold=0]/x") == \
        "pg16/pgbouncer1.24/pgjdbc[prepareThreshold=0]/x"


def test_a_diff_cell_names_a_driver_whose_id_ends_in_its_major() -> None:
    from leakcheck.config.diff_sides import parse_side

    assert parse_side("pg16/pgbouncer1.24/pgx-v5").driver == "pgx-v5"
    assert parse_side("pg16/pgbouncer1.24/pgx-v5-5.13").driver == "pgx-v5"
    cell = parse_side("pg16/pgbouncer1.24/pgx-v5[default_query_exec_mode=exec]")
    assert (cell.driver, cell.driver_settings) == ("pgx-v5", (("default_query_exec_mode", "exec"),))
    assert parse_side("pg16/pgbouncer1.24/psycopg3.3").driver == "psycopg"
