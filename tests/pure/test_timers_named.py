"""Whether a run's own settings may set a timer on a client's session, which the witness cannot see: then a pool
held for another client's transaction is never judged kept before the step's bound (run/runner.py)."""

from leakcheck.model.target import Application, Driver, Pooler, PoolerKind, Route, Target
from leakcheck.model.versions import Version
from leakcheck.probes import PROBES
from leakcheck.run.runner import names_a_timer

PG, BOUNCER = Version((16, 14)), Pooler(PoolerKind.PGBOUNCER, Version((1, 24, 1)))
TX = next(p for p in PROBES if p.id == "tx_unit_of_work")
PGJDBC = Driver("pgjdbc")
TIMER = (("options", "-c idle_in_transaction_session_timeout=2000"),)


def test_a_drivers_setting_that_names_a_timeout_keeps_the_pool_from_being_judged_kept_early() -> None:
    # before, only a probe's startup parameter was looked at: a team's pgjdbc options setting a session timer that
    # ends the held transaction at 2 s would have been called a stalled pool at 0.5 s
    assert names_a_timer(TX, Target(PG, BOUNCER, Route.TRANSACTION, PGJDBC, driver_settings=TIMER))


def test_b_s_own_settings_in_a_pair_count_too() -> None:
    b = Application(PGJDBC, None, TIMER)
    assert names_a_timer(TX, Target(PG, BOUNCER, Route.TRANSACTION, Driver.PSYCOPG, b=b))


def test_settings_that_name_no_timeout_leave_the_early_look_on() -> None:
    plain = (("prepareThreshold", "0"),)
    assert not names_a_timer(TX, Target(PG, BOUNCER, Route.TRANSACTION, PGJDBC, driver_settings=plain))
