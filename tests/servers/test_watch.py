"""A server that dies or is stopped while a probe runs ends that probe at once: an error naming the server and
how it ended, never a verdict, and never the probe's whole timeout. A stop signal while a hung pooler is
being waited for ends the run within seconds.

Real servers, killed (SIGKILL) or stopped (SIGSTOP) by the test in the middle of a probe's long statement. The
only timing checks are generous bounds: several times the watcher's (docs/backends.md), far below
the probe's 30 s timeout.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from leakcheck.model.target import Driver, Pooler, PoolerKind, Route, Target
from leakcheck.model.verdicts import Observation, Outcome, Verdict
from leakcheck.model.versions import parse_spec
from leakcheck.probes.base import Probe
from leakcheck.probes.scenario import Scenario
from leakcheck.provision.host.proc_sockets import children_of
from leakcheck.provision.native import NativeBackend
from leakcheck.run.failfast import FailFast
from leakcheck.run.runner import run_probe
from tests.support.processes import server_on

pytestmark = pytest.mark.servers

#: Far below the probe's 30 s timeout; several times the watcher's bound (a look every 0.1 s, 1 s to end).
LOST_BOUND = 8.0


class Hit:
    """Half a second into A's 20 s statement, `signum` goes to the server on `port(scenario)`; when is kept."""

    def __init__(self, signum: signal.Signals, postmaster: bool) -> None:
        self.signum, self.postmaster = signum, postmaster
        self.pid = 0
        self.at = 0.0

    def probe(self, backend: NativeBackend, target: Target) -> Probe:
        async def body(s: Scenario) -> Observation:
            await s.a.query("SELECT 1")
            port = backend.postgres(target.pg).port if self.postmaster else s.addresses[0].port
            self.pid = server_on(port)
            asyncio.get_running_loop().call_later(0.5, self._send)
            await s.a.query("SELECT pg_sleep(20)")
            return Observation("A's statement ran to its end")

        return Probe(id="sleeps", state="a long statement", body=body)

    def _send(self) -> None:
        os.kill(self.pid, self.signum)
        self.at = time.monotonic()


def _cell(backend: NativeBackend) -> Target:
    pg = backend.resolve_pg(parse_spec("16", "--pg"))
    bouncer = Pooler(PoolerKind.PGBOUNCER, backend.resolve_pooler(PoolerKind.PGBOUNCER, parse_spec("1.24", "-")))
    return Target(pg, bouncer, Route.TRANSACTION, Driver.PSYCOPG)


def _hit(signum: signal.Signals, postmaster: bool) -> tuple[Outcome, float]:
    """The probe's outcome, and how long after the signal it came."""
    with NativeBackend() as backend:
        target = _cell(backend)
        hit = Hit(signum, postmaster)
        try:
            outcome = run_probe(FailFast(backend), hit.probe(backend, target), target)
            took = time.monotonic() - hit.at
        finally:
            if hit.pid and signum is signal.SIGSTOP:
                os.kill(hit.pid, signal.SIGCONT)  # the backend's stop acts on a running one
    assert hit.at, f"the probe ended before its server was hit: {outcome.evidence}"
    return outcome, took


def test_a_postmaster_killed_during_a_probe_ends_it_at_once_with_an_error_naming_postgresql() -> None:
    outcome, took = _hit(signal.SIGKILL, postmaster=True)
    assert outcome.verdict is Verdict.ERROR
    assert "PostgreSQL 16" in outcome.evidence and "SIGKILL" in outcome.evidence, outcome.evidence
    assert took < LOST_BOUND, f"the probe ended {took:.1f} s after its PostgreSQL was killed"


def test_a_pgbouncer_stopped_during_a_probe_ends_it_at_once_with_an_error_naming_pgbouncer() -> None:
    outcome, took = _hit(signal.SIGSTOP, postmaster=False)
    assert outcome.verdict is Verdict.ERROR
    assert "PgBouncer" in outcome.evidence and "1.24" in outcome.evidence, outcome.evidence
    assert "stopped" in outcome.evidence, outcome.evidence
    assert took < LOST_BOUND, f"the probe ended {took:.1f} s after its PgBouncer was stopped"


#: A run's start (lanes start every server up front) whose PgBouncer never answers (hung: its console is
#: never ready; a stopped one fails its start at once, test_leftovers.py): the run waits for it to get ready.
_READINESS_COMMAND = textwrap.dedent("""
    import sys
    from leakcheck.cli.exits import guarded
    from leakcheck.model.target import Driver, Pooler, PoolerKind, Route, Target
    from leakcheck.model.versions import parse_spec
    from leakcheck.probes import PROBES
    from leakcheck.provision.host.pooler_process import PoolerProcess
    from leakcheck.provision.native import NativeBackend
    from leakcheck.provision.pgbouncer import admin
    from leakcheck.run.failfast import FailFast
    from leakcheck.run.lanes import Lanes

    spawn = PoolerProcess._spawn

    def hung(self):
        spawn(self)
        admin.answers = lambda endpoint: "it does not answer (hung)"
        print("spawned", self._process.pid, flush=True)

    def body():
        with NativeBackend() as backend:
            pg = backend.resolve_pg(parse_spec("16", "--pg"))
            pooler = Pooler(PoolerKind.PGBOUNCER, backend.resolve_pooler(PoolerKind.PGBOUNCER, parse_spec("1.24", "-")))
            backend.postgres(pg)
            PoolerProcess._spawn = hung
            probe = next(p for p in PROBES if p.id == "timezone")
            lanes = Lanes(FailFast(backend), 1, lambda p, t: p.id)
            lanes.start([(probe, Target(pg, pooler, Route.TRANSACTION, Driver.PSYCOPG))])
            lanes.close()
        return 0

    sys.exit(guarded(body))
""")

#: The clean-up bound (2 s) and a stop (3 s), with room for a loaded machine.
STOP_BOUND = 10.0


def test_sigterm_while_the_run_waits_for_a_hung_pgbouncer_to_get_ready_ends_it_within_seconds() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _READINESS_COMMAND], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, text=True)
    with proc:
        try:
            assert proc.stdout is not None
            word, pid = proc.stdout.readline().split()
            assert word == "spawned"
            time.sleep(1.0)  # now waiting for the PgBouncer to answer
            proc.send_signal(signal.SIGTERM)
            started = time.monotonic()
            try:
                code = proc.wait(STOP_BOUND)
            except subprocess.TimeoutExpired:
                pytest.fail(f"SIGTERM did not end a run waiting for a hung PgBouncer within {STOP_BOUND:.0f} s")
            assert code == 130, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() - started < STOP_BOUND
            assert not Path(f"/proc/{pid}").exists() or not children_of(proc.pid), "the PgBouncer is left"
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
