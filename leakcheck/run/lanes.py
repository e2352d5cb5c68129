"""Independent cells at the same time, each probe still on fresh server connections.

A lane is everything that shares one pooler process (or, for the direct and shared routes, one
PostgreSQL and driver): its probes run one after another (each lane's list rotated, `staggered`);
lanes run side by side in threads, as many as `jobs`. Servers and poolers are started up front,
from the main thread (a fork from a thread is not safe with PDEATHSIG's preexec hook), and
pytest's items then take their outcomes in pytest's own order.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

from leakcheck.drivers.agents.catalogue import AGENT_LANES, shipped
from leakcheck.model.errors import UsageError
from leakcheck.model.target import Driver, Target
from leakcheck.model.verdicts import Outcome, ServerId, Verdict
from leakcheck.probes.base import Probe
from leakcheck.provision.base import Backend
from leakcheck.provision.host.timing import mark, timed
from leakcheck.run import signals
from leakcheck.run.runner import is_running_pooler, plan_of, pool_settings, run_probe

LaneKey = tuple[object, ...]
#: Seconds a stopped run waits for its lanes' running probes before it stops the servers under them.
CLOSE_GRACE = 2.0
Work = tuple[Probe, Target]

#: The most probe runs one matrix may collect (the README's native matrix is 3,024; one PostgreSQL of the driver
#: gate about 2,500 per six drivers): more is a usage error that says to split the matrix, never a run that
#: starts without a word.
MAX_RUNS = 10000
#: The most pooler processes one run starts for one PostgreSQL version. Every lane's pooler starts
#: up front and runs to the end, each keeping up to two of that PostgreSQL's 300 connections
#: (max_connections, provision/postgres/server.py; each lane's witness takes one more); the driver gate starts
#: 54 per version.
MAX_POOLERS_PER_PG = 64
_SPLIT = ("split it: fewer --pg, pooler versions, settings axes or drivers per run (or one matrix file "
          "per pooler), and join the runs' --results with `leakcheck merge`")


def check_capacity(work: Sequence[Work]) -> None:
    """A one-line UsageError, before any server starts, when the matrix is larger than one run holds."""
    if len(work) > MAX_RUNS:
        raise UsageError(f"the matrix has {len(work)} probe runs, more than the {MAX_RUNS} one run takes; {_SPLIT}")
    poolers: dict[object, set[LaneKey]] = {}
    for probe, target in work:
        if pool_settings(probe, target) is not None and not is_running_pooler(target):
            poolers.setdefault(target.pg, set()).add(lane_of(probe, target))
    for pg, lanes in poolers.items():
        if len(lanes) > MAX_POOLERS_PER_PG:
            raise UsageError(f"the matrix needs {len(lanes)} pooler processes on PostgreSQL {pg}, more than the "
                             f"{MAX_POOLERS_PER_PG} one server holds (each keeps server connections); {_SPLIT}")


def default_jobs(agents: bool = False, per_core: int = AGENT_LANES) -> int:
    """Lanes at a time. Six per core, at most 12, where every client runs in leakcheck's own process (psycopg,
    asyncpg): a lane spends most of its time waiting for its servers, and a probe that sleeps (a COPY's pause,
    statement_timeout's) holds its lane meanwhile (measured on 2 cores, the default matrix: 8 lanes 41.6 s,
    12 lanes 38.4 s, 16 lanes 38.7 s). `per_core` (four by default), at most 8, where `agents` run: each lane
    keeps agent processes of its own (a JVM each for pgjdbc), so more lanes start more of them."""
    per_core, most = (per_core, 8) if agents else (6, 12)
    return max(1, min(most, per_core * (os.cpu_count() or 1)))


def runs_agents(work: Sequence[Work]) -> bool:
    """Whether a client of any run is an agent process (a driver not in leakcheck's own process)."""
    return any(not (target.driver.native and target.b_app.driver.native) for _, target in work)


def agent_lanes_per_core(work: Sequence[Work]) -> int:
    """Lanes per core for a matrix that runs agents: what its runs' drivers ask for (catalogue `lanes_per_core`;
    a run the fewest of its two applications' drivers', AGENT_LANES for psycopg, asyncpg and a team's own agent),
    averaged over the runs and rounded: a matrix of hibernate alone runs its 2, one of many drivers about 4."""
    def asked(driver: Driver) -> int:
        entry = None if driver.native else shipped(driver)
        return AGENT_LANES if entry is None else entry.lanes_per_core

    each = [min(asked(target.driver), asked(target.b_app.driver)) for _, target in work]
    return max(1, round(sum(each) / len(each))) if each else AGENT_LANES


def staggered(lanes: Sequence[Sequence[Work]], jobs: int) -> list[list[Work]]:
    """Each lane's runs rotated so that the `jobs` lanes that start together start at different probes:
    the i-th begins i/jobs of the way into its list. Every lane holds the same probes in the same order,
    so unrotated the probes that wait without work (statement_timeout's sleep; cancel_late's CANCEL_BOUND
    where the route cannot say that no cancel is in flight) came in every running lane at once and the
    cores stood idle. Each run starts from fresh
    server connections (the runner checks it), so where it comes in its lane does not change what it
    measures; pytest still reports the tests in its own order."""
    out = []
    for i, items in enumerate(lanes):
        shift = (i % jobs) * len(items) // jobs
        out.append([*items[shift:], *items[:shift]])
    return out


def lane_of(probe: Probe, target: Target) -> LaneKey:
    """Runs that share a pooler process share a lane (runner.pooler_lane: one per driver, a pair's both); every
    run through a running pooler (--pooled-dsn) shares one lane, whatever its driver: its server connections are
    the same for all of them."""
    if is_running_pooler(target):
        return ("running pooler", target.pooler)
    return (target.pg, target.pooler, target.route, target.drivers, pool_settings(probe, target))


class Lanes:
    """Runs `work` in lanes; `result()` waits for one outcome."""

    def __init__(self, backend: Backend, jobs: int, name: Callable[[Probe, Target], str],
                 on_test: Callable[[str], None] = lambda _: None) -> None:
        self.backend, self.jobs, self.name, self.on_test = backend, jobs, name, on_test
        self._futures: dict[tuple[str, str], Future[Outcome]] = {}
        self._stop = threading.Event()
        self._pool: ThreadPoolExecutor | None = None
        self._lanes: list[Future[None]] = []

    def start(self, work: Sequence[Work]) -> None:
        try:
            self._start(work)
        except BaseException as exc:  # every test gets this failure, none waits for a lane that never ran
            for future in self._futures.values():
                if not future.done():
                    future.set_exception(exc)
            raise

    def _start(self, work: Sequence[Work]) -> None:
        lanes: dict[LaneKey, list[Work]] = {}
        for probe, target in work:
            self._futures[self._key(probe, target)] = Future()
        for probe, target in work:
            lanes.setdefault(lane_of(probe, target), []).append((probe, target))
        longest = sorted(lanes, key=lambda key: -len(lanes[key]))  # the longest first: no long lane is the tail
        lanes = dict(zip(longest, staggered([lanes[key] for key in longest], self.jobs), strict=True))
        mark("lanes start")
        # What the run made so far (pytest's items, the targets, the modules) lives to its end: out of the
        # collector's sight, a full collection during the probes walks only what they make.
        gc.freeze()
        # A stop signal now ends the run at once: only each fork holds it (provision/host/forks.py).
        with timed("servers"):
            self._start_together([items[0] for items in lanes.values()])
            warm = {key: self._warm_up(items[0]) for key, items in lanes.items()}
        self._pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="leakcheck-lane")
        for key, items in lanes.items():
            self._lanes.append(self._pool.submit(self._run_lane, items, warm[key]))

    def result(self, probe: Probe, target: Target) -> Outcome:
        signals.check()  # a swallowed Ctrl-C ends the run here, at the next test
        return self._futures[self._key(probe, target)].result()

    def close(self) -> None:
        """Let no lane start another probe; wait for the running ones, CLOSE_GRACE seconds at most when
        interrupted (the servers are stopped next, which ends a probe stuck on a hung one), else each
        bounded by its timeout."""
        self._stop.set()
        gc.unfreeze()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            # only the lanes that started: wait() never counts one that shutdown cancelled as done (pytest -x
            # stops the run with lanes still queued behind the running ones)
            started = [lane for lane in self._lanes if not lane.cancelled()]
            wait(started, timeout=CLOSE_GRACE if signals.received() else None)

    def _key(self, probe: Probe, target: Target) -> tuple[str, str]:
        return probe.id, target.test_id(probe.id)

    def _start_together(self, firsts: Sequence[Work]) -> None:
        """Every lane's servers at once, where the backend can (the native one: see its warm())."""
        pgs = [target.pg for _, target in firsts]
        poolers = []
        for probe, target in firsts:
            key = plan_of(probe, target).pooler_key
            if key is not None:
                poolers.append(key)
        with contextlib.suppress(Exception):  # only a head start: each lane's warm-up reports failures
            self.backend.warm(pgs, poolers)

    def _warm_up(self, first: Work) -> BaseException | None:
        """Start the lane's servers now, from the main thread; a failure goes to its first test."""
        probe, target = first
        self.on_test(self.name(probe, target))
        plan = plan_of(probe, target)
        try:
            if not is_running_pooler(target):  # a running pooler's PostgreSQL may be out of reach
                self.backend.postgres(target.pg)
            if plan.settings is not None:
                key = plan.pooler_key
                assert key is not None
                with self.backend.pooler(*key):
                    pass
        except Exception as exc:  # noqa: BLE001 - reported as the first test's error outcome
            return exc
        return None

    def _run_lane(self, items: Sequence[Work], failed: BaseException | None) -> None:
        earlier: set[ServerId] = set()
        for index, (probe, target) in enumerate(items):
            future = self._futures[self._key(probe, target)]
            if self._stop.is_set():
                future.cancel()
                continue
            try:
                if failed is not None and index == 0:
                    outcome = _error(probe, target, f"the harness failed: {type(failed).__name__}: {failed}")
                else:
                    self.on_test(self.name(probe, target))
                    with timed("probe runs"), timed(f"probe {probe.id}"):  # benchmark.py: the slowest probes
                        outcome = run_probe(self.backend, probe, target, earlier)
                future.set_result(outcome)
            except BaseException as exc:  # noqa: BLE001 - never leave pytest waiting
                future.set_exception(exc)
        mark("lanes done", last=True)


def _error(probe: Probe, target: Target, evidence: str) -> Outcome:
    return Outcome(probe=probe.id, target=target, verdict=Verdict.ERROR, evidence=evidence, security=probe.security)
