"""What the tests with servers share: the versions they check and `Measure`, a probe run by id on a route.
Imported by those tests directly (not through a conftest)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from leakcheck.model.target import NATIVE_DRIVERS, Driver, Pooler, PoolerKind, Route, Target
from leakcheck.model.verdicts import Outcome
from leakcheck.model.versions import Version, parse_spec
from leakcheck.probes import PROBES
from leakcheck.probes.base import Probe
from leakcheck.provision.native import NativeBackend
from leakcheck.run.runner import run_probe

#: Versions the facts are checked on; override with LEAKCHECK_TEST_PG / LEAKCHECK_TEST_BOUNCER.
TEST_PG = os.environ.get("LEAKCHECK_TEST_PG", "16,18").split(",")
TEST_BOUNCER = os.environ.get("LEAKCHECK_TEST_BOUNCER", "1.18,1.24,1.26").split(",")
DRIVERS = list(NATIVE_DRIVERS)



class Measure:
    """Resolve versions once and run a probe by id on a chosen route."""

    def __init__(self, backend: NativeBackend) -> None:
        self.backend = backend
        self._pg: dict[str, Version] = {}
        self._bouncer: dict[str, Pooler] = {}

    def pg(self, spec: str) -> Version:
        if spec not in self._pg:
            self._pg[spec] = self.backend.resolve_pg(parse_spec(spec, "--pg"))
        return self._pg[spec]

    def bouncer(self, spec: str) -> Pooler:
        """The PgBouncer `spec` resolves to, at its defaults (no settings axes)."""
        if spec not in self._bouncer:
            version = self.backend.resolve_pooler(PoolerKind.PGBOUNCER, parse_spec(spec, "--bouncer"))
            self._bouncer[spec] = Pooler(PoolerKind.PGBOUNCER, version)
        return self._bouncer[spec]

    def __call__(self, probe: str | Probe, pg: str, bouncer: str | None, driver: Driver,
                 route: Route = Route.TRANSACTION) -> Outcome:
        chosen = probe if isinstance(probe, Probe) else next(p for p in PROBES if p.id == probe)
        target = Target(self.pg(pg), self.bouncer(bouncer) if bouncer else None, route, driver)
        return run_probe(self.backend, chosen, target)


@contextlib.contextmanager
def enterable_folder(prefix: str = "leakcheck-test-") -> Iterator[Path]:
    """A temp folder the server user may enter (pytest's tmp_path is private to its owner), removed after."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
