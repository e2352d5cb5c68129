"""The run: one backend, the resolved targets, every outcome, and how each is judged."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from .config import Config
from .errors import LeakcheckError
from .expectations import load
from .failfast import FailFast
from .judge import problem
from .lanes import Lanes, default_jobs
from .probes import Probe
from .provision.base import Backend
from .runner import run_probe
from .verdicts import Outcome, Route, Target, Verdict


def choose_backend(requested: str) -> tuple[str, str]:
    """The backend to use and why (`auto`: containers when a Docker engine answers, else native)."""
    if requested != "auto":
        return requested, f"--backend={requested}"
    try:
        from .provision.containers_engine import connect
    except ImportError:
        return "native", "auto: testcontainers is not installed (pip install 'leakcheck[containers]')"
    try:
        connect().client.close()
    except LeakcheckError as exc:
        return "native", f"auto: {exc}"
    return "containers", "auto: a Docker engine answered"


def make_backend(config: Config) -> Backend:
    """The backend `config.backend` names (`auto` decided by `choose_backend`)."""
    if choose_backend(config.backend)[0] == "containers":
        from .provision.containers import ContainersBackend

        backend: Backend = ContainersBackend(pg_image=config.pg_image, bouncer_image=config.bouncer_image)
        return backend
    from .provision.native import NativeBackend

    return NativeBackend()


@dataclass
class MatrixRun:
    config: Config
    outcomes: list[Outcome] = field(default_factory=list)
    #: the --expect verdicts, loaded and checked before the run (preflight); loaded on first use if not
    expected: Mapping[str, Verdict] | None = None
    _backend: FailFast | None = None
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _choice: tuple[str, str] | None = None
    _lanes: Lanes | None = None

    @property
    def choice(self) -> tuple[str, str]:
        """The backend this run uses and why (decided once)."""
        if self._choice is None:
            self._choice = choose_backend(self.config.backend)
        return self._choice

    @property
    def why(self) -> str:
        return f"backend {self.choice[0]} ({self.choice[1]})"

    @property
    def backend(self) -> Backend:
        """The run's backend; a server that failed to start is not retried by later tests (FailFast)."""
        if self._backend is None:
            chosen = replace(self.config, backend=self.choice[0])
            self._backend = self._stack.enter_context(FailFast(make_backend(chosen)))
        return self._backend

    def close(self) -> None:
        try:
            if self._lanes is not None:
                self._lanes.close()
        finally:
            self._stack.close()

    def start(self, work: Sequence[tuple[Probe, Target]]) -> None:
        """Run `work` (the selected tests, in pytest's order) in concurrent lanes from now on."""
        if self._lanes is None and work:
            failfast = self._failfast() if self._backend is not None else None

            def on_test(name: str) -> None:
                if failfast is not None:
                    failfast.current = name

            self._lanes = Lanes(self.backend, self.config.jobs or default_jobs(), _test_name, on_test)
            self._lanes.start(work)

    def targets(self) -> list[Target]:
        """Resolve every --pg and --bouncer value (fetching or building as needed)."""
        pgs = list(dict.fromkeys(self.backend.resolve_pg(s) for s in self.config.pg))
        bouncers = list(dict.fromkeys(self.backend.resolve_bouncer(s) for s in self.config.bouncer))
        drivers = self.config.drivers
        out = [Target(pg, b, Route.TRANSACTION, d) for pg in pgs for b in bouncers for d in drivers]
        if self.config.controls:
            out += [Target(pg, None, route, d) for route in (Route.DIRECT, Route.SHARED) for pg in pgs for d in drivers]
            out += [Target(pg, b, Route.SESSION, d) for pg in pgs for b in bouncers for d in drivers]
        return out

    def items(self) -> Iterator[tuple[str, Probe, Target]]:
        for target in self.targets():
            for probe in self.config.probes:
                yield _test_name(probe, target), probe, target

    def run(self, probe: Probe, target: Target) -> Outcome:
        """The outcome of one test: from its lane when started, else measured here and now."""
        if self._lanes is not None:
            outcome = self._lanes.result(probe, target)
        else:
            backend = self.backend
            self._failfast().current = _test_name(probe, target)
            outcome = run_probe(backend, probe, target)
        self.outcomes.append(outcome)
        return outcome

    def judge(self, probe: Probe, outcome: Outcome) -> str | None:
        """None when the outcome passes; else the failure message (judge.problem, shared with leakcheck merge)."""
        if self.config.expect is not None and self.expected is None:
            self.expected = load(self.config.expect)
        return problem(probe, outcome, self.expected)

    def _failfast(self) -> FailFast:
        assert self._backend is not None
        return self._backend

    def describe(self) -> list[str]:
        return list(self.backend.describe()) if self._backend is not None else []


def _test_name(probe: Probe, target: Target) -> str:
    kind = "test_leak" if target.route is Route.TRANSACTION else "test_control"
    return f"{kind}[{target.test_id(probe.id)}]"
