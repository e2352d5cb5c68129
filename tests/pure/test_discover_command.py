"""`leakcheck discover` around the search, with stand-in labs (no servers): exit codes."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import psycopg
import pytest

from leakcheck.discover import command, lab
from leakcheck.discover.compare import Comparison, Diff
from leakcheck.discover.differential import Differential
from leakcheck.discover.engine import confirm, tighten
from leakcheck.discover.findings import Candidate, Finding
from leakcheck.discover.ops import Kind, Op, Who
from leakcheck.discover.options import Options
from leakcheck.discover.trace import Abort
from leakcheck.model.errors import StartError
from leakcheck.model.target import Application, Driver, Route
from leakcheck.model.versions import Version

OPS = (Op(Who.A, Kind.SET, "work_mem"), Op(Who.B, Kind.OBSERVE))


class BrokenLab:
    """A lab whose route cannot be reached: every measurement fails with `error`."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.where = lab.LabRoute(Version.parse("16"), None, Route.DIRECT)
        self.running_pooler = False

    def for_driver(self, driver: Driver) -> BrokenLab:
        return self

    @contextlib.contextmanager
    def subject(self) -> Iterator[object]:
        raise self.error
        yield


def broken(ops: tuple[Op, ...]) -> Comparison:
    raise psycopg.OperationalError("server closed the connection unexpectedly")


@pytest.mark.parametrize("error", [StartError("PgBouncer did not start: port in use.\n--- log ---\nx"),
                                   psycopg.OperationalError("connection refused")])
def test_a_measurement_that_cannot_reach_a_server_is_an_abort(error: Exception) -> None:
    with Differential(BrokenLab(error), Driver.PSYCOPG) as measure, pytest.raises(Abort) as caught:  # type: ignore[arg-type]
        measure(())
    assert type(error).__name__ in str(caught.value) and "\n" not in str(caught.value)


def test_a_harness_failure_while_tightening_or_confirming_is_an_abort() -> None:
    cut = Candidate(OPS, Comparison(()), "setting:work_mem", shrunk=False)
    with pytest.raises(Abort, match="OperationalError"):
        tighten(broken, cut, [], time.monotonic() + 10)
    finding = Finding(OPS, Comparison(()), "setting:work_mem", 1, True, (), ("session:work_mem",))
    with pytest.raises(Abort, match="OperationalError"):
        list(confirm(broken, [finding]))


@pytest.mark.parametrize("error", [StartError("PgBouncer did not start"), psycopg.OperationalError("refused")])
def test_a_baseline_that_cannot_be_measured_exits_3_with_one_line(
        error: Exception, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    @contextlib.contextmanager
    def fake_lab(raw: dict[str, str | None], route: Route) -> Iterator[BrokenLab]:
        yield BrokenLab(error)

    monkeypatch.setattr(lab, "open_lab", fake_lab)
    code = command.run(Options(cell=(("leakcheck_pg", "16"),), route=Route.DIRECT, budget=1.0, seed=1))
    err = capsys.readouterr().err
    assert code == command.EXIT_UNMEASURED
    assert err.count("\n") == 1 and err.startswith("leakcheck: error: discovery could not measure: the harness failed")


def test_the_printed_cell_names_pgbouncer_and_its_pool_size_as_the_readme_does() -> None:
    from leakcheck.model.pool_settings import PoolSettings
    from leakcheck.model.target import Pooler, PoolerKind

    where = lab.LabRoute(Version.parse("16.14"), Pooler(PoolerKind.PGBOUNCER, Version.parse("1.24.1")),
                      Route.TRANSACTION, PoolSettings())
    assert where.describe() == "PostgreSQL 16.14, PgBouncer 1.24.1 (pool_mode=transaction, default_pool_size=1)"


class Replayed(Differential):
    """A Differential whose measurements are given, in turn (no lab): for what it makes of them."""

    def __init__(self, *measured: Comparison, pair: bool = False) -> None:
        self.measured = list(measured)
        self.seen_start: list[tuple[Diff, ...]] = []
        self.b = Application(Driver("node-postgres")) if pair else None
        self.start = ()

    def _measure(self, ops: tuple[Op, ...]) -> Comparison:
        self.seen_start.append(self.start)
        return self.measured.pop(0)


def _start(who: Who, key: str, through: str, direct: str) -> Diff:
    return Diff(0 if who is Who.A else 1, who, key, through, direct)


def test_the_start_is_each_setting_difference_of_the_empty_sequences_once_whichever_client_showed_it() -> None:
    date_a, date_b = (_start(who, "reported:DateStyle", "'ISO'", "'ISO, MDY'") for who in Who)
    name_b = _start(Who.B, "reported:application_name", "''", "'PostgreSQL JDBC Driver'")
    measure = Replayed(Comparison((date_a, date_b)), Comparison((date_a, name_b, date_b)), Comparison((date_a,)))
    assert measure.learn_start() == (date_a, name_b)  # one application: B's start is A's too
    assert measure.seen_start == [(), (), ()]  # measured as they are, nothing left out while learning
    paired = Replayed(Comparison((date_a, date_b)), Comparison(()), Comparison(()), pair=True)
    assert paired.learn_start() == (date_a, date_b)  # a mixed pair: each application's own


@pytest.mark.parametrize("key", ["outcome:lost write", "prepared", "locks", "observe", "current_user"])
def test_an_empty_sequence_that_differs_in_anything_but_a_settings_value_cannot_be_compared(key: str) -> None:
    measure = Replayed(Comparison((_start(Who.B, key, "x", "y"),)), Comparison(()), Comparison(()))
    with pytest.raises(Abort, match=f"differ before any op in what is no setting's value \\(B {key}: x vs y\\)"):
        measure.learn_start()
