"""Adding a pooler is one folder and one registry row: a product registered here, in the test (its record
and its behaviour, as provision/<product>/product.py gives them), flows through the options, their checks,
preflight, the native backend's lookup, test ids, gate keys, results files and reports with no other edit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakcheck.config import preflight
from leakcheck.config.config import Config
from leakcheck.gate.expectations import key
from leakcheck.gate.record import controls_of
from leakcheck.model import products as records
from leakcheck.model.errors import UsageError
from leakcheck.model.products import Product
from leakcheck.model.target import Driver, Pooler, PoolerKind, Route, Target
from leakcheck.model.team_settings import TeamSettings
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.model.versions import Spec, Version
from leakcheck.probes import PROBES
from leakcheck.provision import products
from leakcheck.provision.base import Binary
from leakcheck.provision.native import NativeBackend
from leakcheck.provision.product import PoolerProduct, Running, Start
from leakcheck.reports.html import render_html
from leakcheck.reports.markdown import render_markdown
from leakcheck.reports.terminal import render_matrix
from leakcheck.results.results import Results, dumps, parse
from leakcheck.run.matrix import pooler_cells
from leakcheck.run.runner import ProbePlan, is_running_pooler, may_hold, pool_settings, subject_mode


def _resolve(spec: Spec, cache: Path, option: str) -> Binary:
    return Binary(Version.parse(f"{spec.raw}.7"), ("/opt/fakepool/bin/fakepool",), "the test's")


def _process(start: Start) -> Running:
    raise AssertionError("no process starts in a pure test")


#: The one row: what provision/fakepool/product.py would hold.
FAKE = PoolerProduct(
    Product("fakepool", "FakePool", aliases=("fake-pool",), may_hold=True, pool_shape=("pool_size",)),
    _resolve, _process, TeamSettings("FakePool", frozenset({"max_clients"}), examples=("max_clients",)),
)


@pytest.fixture
def fakepool() -> Iterator[PoolerKind]:
    products.register(FAKE)
    try:
        yield PoolerKind("fakepool")
    finally:
        del products.PRODUCTS["fakepool"], records.PRODUCTS["fakepool"]


def _config(**raw: str) -> Config:
    return Config.from_strings({"leakcheck_pg": "16", **{f"leakcheck_{k}": v for k, v in raw.items()}})


def test_a_registered_product_is_a_kind_ids_keys_and_results_files_read_back(fakepool: PoolerKind) -> None:
    assert PoolerKind("fakepool") is fakepool and fakepool.product == "FakePool" and fakepool.started
    cfg = _config(pooler="fake-pool:2.1,pgbouncer:1.24", pooler_set="fakepool:max_clients=10,20")
    assert [(kind.value, spec.raw) for kind, spec in cfg.poolers] == [("fakepool", "2.1"), ("pgbouncer", "1.24")]
    cells = pooler_cells(cfg.pooler_tables, lambda kind, spec: Version.parse(f"{spec.raw}.7"))
    fake = [c.label() for c in cells if c.kind is fakepool]
    assert fake == ["fakepool2.1.7[max_clients=10]", "fakepool2.1.7[max_clients=20]"]
    target = Target(Version.parse("16.4"), cells[0], Route.TRANSACTION, Driver.PSYCOPG, Version.parse("3.2.1"))
    assert target.test_name("timezone") == "test_leak[pg16.4-fakepool2.1.7[max_clients=10]-psycopg3.2.1-timezone]"
    outcome = Outcome("timezone", target, Verdict.LEAKS, "B saw A's timezone")
    assert key(outcome) == "pg16/fakepool2.1[max_clients=10]/psycopg3.2/timezone"
    text = dumps(Results((outcome,)))
    assert parse(json.loads(text), "results.json").outcomes == (outcome,)
    for page in (render_markdown([outcome]), render_html([outcome]), render_matrix([outcome])):
        assert "fakepool2.1.7" in page


def test_a_registered_product_s_options_are_checked_by_its_own_allow_list(fakepool: PoolerKind) -> None:
    with pytest.raises(UsageError, match="FakePool's pool_mode is not a setting a team may set"):
        _config(pooler="fakepool:2.1", pooler_set="fakepool:pool_mode=session")
    with pytest.raises(UsageError, match="a pooler kind: pgbouncer, odyssey, pgpool or fakepool"):
        _config(pooler="nopool:1.0")
    with pytest.raises(UsageError, match="a pooler kind: pgbouncer, odyssey, pgpool or fakepool"):
        _config(pooler="fakepool:2.1", pooler_set="nopool:x=1")
    with pytest.raises(UsageError, match="the containers backend cannot start FakePool"):
        _config(pooler="fakepool:2.1", backend="containers")
    preflight.check(_config(pooler="fakepool:2.1", backend="native"), "native")


def test_a_registered_product_is_found_by_the_native_backend_and_its_policies_by_the_runner(
    fakepool: PoolerKind, tmp_path: Path
) -> None:
    backend = NativeBackend(cache=tmp_path)
    assert backend.resolve_pooler(fakepool, Spec(raw="2.1", version=Version.parse("2.1"))) == Version.parse("2.1.7")
    assert list(backend.describe()) == ["FakePool 2.1.7: /opt/fakepool/bin/fakepool (the test's)"]
    pooler = Pooler(fakepool, Version.parse("2.1.7"))
    target = Target(Version.parse("16.4"), pooler, Route.TRANSACTION, Driver.PSYCOPG)
    probe = PROBES[0]
    assert subject_mode(pooler).value == "transaction" and not is_running_pooler(target)
    assert may_hold(ProbePlan(probe, target, pool_settings(probe, target)))


def test_a_registered_product_leakcheck_does_not_start_has_no_session_control_as_the_running_pooler_has_none(
) -> None:
    # one question, "did leakcheck start this pooler", asked of the product's record (kind.started) everywhere
    products.register(PoolerProduct(Product("fakedsn", "a running FakePool", started=False), _resolve, _process,
                                    TeamSettings("FakePool", frozenset())))
    try:
        target = Target(Version.parse("16.4"), Pooler(PoolerKind("fakedsn"), config="staging"), Route.TRANSACTION,
                        Driver.PSYCOPG)
        assert is_running_pooler(target)
        assert [t.route for t in controls_of(target)] == [Route.DIRECT, Route.SHARED]
    finally:
        del products.PRODUCTS["fakedsn"], records.PRODUCTS["fakedsn"]


def test_an_unknown_kind_is_not_a_kind() -> None:
    with pytest.raises(ValueError, match="'fakepool' is not a pooler kind"):
        PoolerKind("fakepool")
