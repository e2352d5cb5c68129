"""Whether a run's own settings may set a timer on a client's session, which the witness cannot see: then a pool
held for another client's transaction is never judged kept before the step's bound (run/runner.py)."""

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from leakcheck.model.target import Application, Driver, Pooler, PoolerKind, Route, Target
from leakcheck.model.versions import Version
from leakcheck.probes import PROBES
from leakcheck.run.runner import names_a_timer, pool_kept

PG, BOUNCER = Version((16, 14)), Pooler(PoolerKind.PGBOUNCER, Version((1, 24, 1)))
TX = next(p for p in PROBES if p.id == "tx_unit_of_work")
PGJDBC = Driver("pgjdbc")
TIMER = (("options", "-c idle_in_transaction_session_timeout=2000"),)
#: what pool_kept reads of the pooler's endpoint before it looks at the applications' settings
ENDPOINT: Any = SimpleNamespace(dsn=None, members=())
WITNESS: Any = object()


def test_a_drivers_setting_keeps_the_pool_from_being_judged_kept_early() -> None:
    # a team's pgjdbc options setting a session timer that ends the held transaction at 2 s: the bound decides
    assert pool_kept(Target(PG, BOUNCER, Route.TRANSACTION, PGJDBC, driver_settings=TIMER), ENDPOINT, WITNESS) is None


def test_b_s_own_settings_in_a_pair_count_too() -> None:
    b = Application(PGJDBC, None, TIMER)
    assert pool_kept(Target(PG, BOUNCER, Route.TRANSACTION, Driver.PSYCOPG, b=b), ENDPOINT, WITNESS) is None


def test_a_probe_whose_startup_parameter_names_a_timeout_is_never_judged_early() -> None:
    timed = replace(TX, startup=("options", "-c idle_in_transaction_session_timeout=2000"))
    assert names_a_timer(timed)
    assert not names_a_timer(TX)
