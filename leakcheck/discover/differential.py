"""One sequence through the route under test and through two direct sessions, compared.

Both runs use fresh connections (and, through the pooler, a pool just emptied by KILL/RESUME),
their own names, and run at the same time (nothing global is shared: channels, lock keys, object
names, rows and the witness's tags carry each run's token), each with a witness of its own (the
witness's marks are one run's). A run whose proofs do not show what its route needs, or that meets
a server connection an earlier sequence used, stops discovery (`Abort`).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import fields
from types import TracebackType

from leakcheck.discover.compare import (
    START_KEYS,
    Comparison,
    Diff,
    beyond_start,
    compare,
    proof_problems,
    results,
    servers_text,
    start_key,
)
from leakcheck.discover.driver_api import abilities
from leakcheck.discover.execute import Run
from leakcheck.discover.lab import Lab
from leakcheck.discover.ops import Abilities, Op, Who
from leakcheck.discover.render import fresh_names
from leakcheck.discover.trace import Abort, Trace, harness_failed
from leakcheck.drivers.agents import client as agents
from leakcheck.drivers.clients import connect
from leakcheck.drivers.interface import Client
from leakcheck.model.target import Application, Driver, Route, Setting
from leakcheck.model.verdicts import ServerId
from leakcheck.probes.witness import Witness, open_witness
from leakcheck.provision.base import Endpoint
from leakcheck.run import signals

#: Seconds one sequence may take on both routes, connections included.
SEQUENCE_TIMEOUT = 30.0
#: Empty sequences measured before the search (`Differential.learn_start`): a difference of the connections'
#: start may show on some of them only (which server connection a client gets, and what set it up).
START_RUNS = 3


async def _close(*clients: Client) -> None:
    for client in clients:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), 5)


async def run_on(lab: Lab, driver: Driver, endpoint: Endpoint, route: Route, ops: tuple[Op, ...],
                 witness: Witness, settings: tuple[Setting, ...] = (), b_app: Application | None = None) -> Trace:
    """The sequence with two fresh clients of one driver (with its --driver-set `settings`; B of its own
    `b_app` in a mixed pair), each its own application, seen by `witness`; the rows they wrote read back once
    they closed. A driver that names statements per process (pgx) gets fresh agents for each sequence, as a
    probe does, so no sequence depends on the ones before it."""
    agents.next_probe()
    b_driver, b_settings = (b_app.driver, b_app.settings) if b_app is not None else (driver, settings)
    a = await connect(driver, "A", endpoint, settings)
    try:
        b = await (lab.clients(a, lambda: connect(b_driver, "B", endpoint, b_settings)) if route is not Route.DIRECT
                   else connect(b_driver, "B", endpoint, b_settings))
    except BaseException:
        await _close(a)
        raise
    run = Run(a, b, Trace(route, fresh_names()), witness)
    try:
        await run.play(ops)
        if route is not Route.DIRECT:
            await lab.done(a, b)
    finally:
        await _close(a, b)
    run.read_back()
    return run.trace


class Differential:
    """Measures sequences on one lab with one driver (or a mixed pair: B's own application `b`); a context
    manager owning its event loop."""

    def __init__(self, lab: Lab, driver: Driver, timeout: float = SEQUENCE_TIMEOUT,
                 settings: tuple[Setting, ...] = (), b: Application | None = None) -> None:
        self.lab = lab.for_driver(driver, *((b.driver,) if b is not None else ()))
        self.driver, self.timeout, self.settings, self.b = driver, timeout, settings, b
        self._seen: dict[Route, set[ServerId]] = {lab.where.route: set(), Route.DIRECT: set()}
        #: What the route shows differently before any op (`learn_start`): left out of every comparison
        self.start: tuple[Diff, ...] = ()
        self._witnesses: list[Witness] = []
        self._loop = asyncio.Runner()

    def _witness(self, n: int) -> Witness:
        """The n-th run's witness (0: the route's, 1: the reference's), connected on first use."""
        while len(self._witnesses) <= n:
            self._witnesses.append(open_witness(self.lab.superuser()))
        return self._witnesses[n]

    def __enter__(self) -> Differential:
        return self

    def abilities(self) -> Abilities:
        """What the driver's API offers beyond SQL (an agent is asked, on a direct connection); a pair's, what
        both drivers offer (an op is drawn for either client)."""
        try:
            asked = abilities(self.driver, self.lab.direct(), self.settings)
            mine = self._loop.run(asyncio.wait_for(asked, self.timeout))
            if self.b is None:
                return mine
            theirs = self._loop.run(asyncio.wait_for(abilities(self.b.driver, self.lab.direct(), self.b.settings),
                                                     self.timeout))
            return Abilities(**{f.name: getattr(mine, f.name) and getattr(theirs, f.name) for f in fields(Abilities)})
        except Exception as exc:  # noqa: BLE001 - Abort is a BaseException and passes through
            raise harness_failed((), exc) from exc

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if signals.received() is not None:  # Ctrl-C: the agents first, so that no client's close waits on a hung one
            agents.stop_all(hurry=True)
        for witness in self._witnesses:
            with contextlib.suppress(Exception):  # closing at the end: nothing to report
                witness.close()
        self._loop.close()

    async def _both(self, ops: tuple[Op, ...], subject: Endpoint) -> tuple[Trace, Trace]:
        route, direct = self.lab.where.route, self.lab.direct()
        mine, theirs = self._witness(0), self._witness(1)
        got = await asyncio.gather(run_on(self.lab, self.driver, subject, route, ops, mine, self.settings, self.b),
                                   run_on(self.lab, self.driver, direct, Route.DIRECT, ops, theirs, self.settings,
                                          self.b))
        return got[0], got[1]

    def __call__(self, ops: tuple[Op, ...]) -> Comparison:
        """The sequence's comparison; any failure to measure it (a server that would not start, a
        connection refused, a proof missing) is an `Abort`, never a difference or a traceback."""
        signals.check()  # a Ctrl-C swallowed during the last one (e.g. in a finalizer) stops here
        try:
            return self._measure(ops)
        except Exception as exc:  # noqa: BLE001 - Abort is a BaseException and passes through
            raise harness_failed(ops, exc) from exc
        finally:
            signals.check()

    def learn_start(self, runs: int = START_RUNS) -> tuple[Diff, ...]:
        """The differences the route shows before any op, over `runs` empty sequences (each once): a fact of
        the connections' start (what the pooler reports of a startup parameter, a setting it does not pass
        on), not of any op, so every later comparison leaves them out where a client still shows those very
        values and no op may have given them (compare.beyond_start). Only a setting's value (`setting:`,
        `reported:`) counts as one: an empty sequence that differs in anything else (what an application lost, a
        prepared statement, a lock, a failed snapshot) cannot be compared (`Abort`)."""
        self.start = ()
        found: dict[tuple[Who | None, str, str, str], Diff] = {}
        for _ in range(runs):
            for diff in self(()).diffs:
                if not diff.key.startswith(START_KEYS):
                    raise Abort(f"the route and the reference differ before any op in what is no setting's value "
                                f"({diff.who} {diff.key}: {diff.subject} vs {diff.reference}); nothing can be "
                                "compared")
                found.setdefault(start_key(diff, self.b is None), diff)
        self.start = tuple(found.values())
        return self.start

    def _measure(self, ops: tuple[Op, ...]) -> Comparison:
        try:
            with self.lab.subject() as subject:
                mine, reference = self._loop.run(asyncio.wait_for(self._both(ops, subject), self.timeout))
        except TimeoutError:
            raise Abort(f"a sequence did not finish within {self.timeout:.0f} s: {', '.join(map(str, ops))}") from None
        problems = [f"{self.lab.where.route}: {p}" for p in proof_problems(mine, self._seen[mine.route])]
        problems += [f"reference: {p}" for p in proof_problems(reference, self._seen[Route.DIRECT])]
        if problems:
            raise Abort(f"{'; '.join(problems)} (sequence: {', '.join(map(str, ops)) or 'none'})")
        if not self.lab.running_pooler:  # a running pooler keeps its server connections (cleaned, not new)
            self._seen[mine.route] |= mine.servers()
        self._seen[Route.DIRECT] |= reference.servers()
        diffs = beyond_start(compare(mine, reference), self.start, ops, self.b is None)
        return Comparison(tuple(diffs), servers_text(mine), servers_text(reference), results(mine, len(ops)))
