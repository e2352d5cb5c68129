"""The containers backend under faults: leakcheck killed (SIGKILL) mid-run, a pooler container killed
(`docker kill`) mid-probe, a port published beyond 127.0.0.1. Whatever happens, no container, network
or fleet folder of the run stays once the run ended (or, for a killed run, once `leakcheck sweep` ran),
the fault is an error and never a verdict, and nothing of a live run is touched.

Each run is a real `leakcheck run --backend=containers` in its own session with its own TMPDIR; its
containers and networks are the engine's objects labelled with its owner (host:pid).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

docker = pytest.importorskip("docker")
pytest.importorskip("testcontainers")
if TYPE_CHECKING:
    from docker.client import DockerClient
    from docker.models.containers import Container

from testcontainers.core.container import DockerContainer  # noqa: E402

from leakcheck.model.errors import StartError  # noqa: E402
from leakcheck.provision.containers.engine import OWNER_LABEL, RUN_LABEL, Engine  # noqa: E402
from tests.containers.test_containers_backend import _engine_or_skip, _template  # noqa: E402

pytestmark = pytest.mark.containers

TIMEOUT = 120.0
#: statement_timeout's 1 s sleep keeps a probe running through the pooler; the others run after the fault.
PROBES = ("--probes=statement_timeout,timezone,temp_table,idle_in_transaction_timeout", "--drivers=psycopg",
          "--controls=no", "--jobs=1", "--pg=16", "--bouncer=1.24")


@pytest.fixture(scope="module")
def client() -> Iterator[DockerClient]:
    with contextlib.closing(_engine_or_skip()) as found:
        yield found


@pytest.fixture(scope="module")
def images(request: pytest.FixtureRequest) -> list[str]:
    pg = _template(request.config, "leakcheck_pg_image", "LEAKCHECK_PG_IMAGE") or "postgres:{version}"
    bouncer = _template(request.config, "leakcheck_bouncer_image", "LEAKCHECK_BOUNCER_IMAGE")
    if bouncer is None:
        pytest.skip("a PgBouncer image template is needed ($LEAKCHECK_BOUNCER_IMAGE; scripts/ci-docker.sh sets it)")
    return [f"--pg-image={pg}", f"--bouncer-image={bouncer}"]


def _owned_by(engine: DockerClient, owner: str, key: str = OWNER_LABEL) -> list[str]:
    """The containers and networks an owner label names (host:pid), or another label (`key`)."""
    label = {"label": f"{key}={owner}"}
    return ([f"container {c.name}" for c in engine.containers.list(all=True, filters=label)]
            + [f"network {n.name}" for n in engine.networks.list(filters=label)])


class Run:
    """`leakcheck run --backend=containers ARGS` in its own session, TMPDIR `tmp`, output in `out`."""

    def __init__(self, engine: DockerClient, tmp: Path, out: Path, args: list[str]) -> None:
        self.engine, self.tmp, self.out = engine, tmp, out
        with open(out, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "leakcheck.cli.main", "run", "--backend=containers", *args], env=_env(tmp),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.owner = f"{socket.gethostname()}:{self.proc.pid}"

    def containers(self) -> list[Container]:
        return list(self.engine.containers.list(filters={"label": f"{OWNER_LABEL}={self.owner}"}))

    def until(self, find: Callable[[], Container | None], what: str) -> Container:
        deadline = time.monotonic() + TIMEOUT
        while (found := find()) is None:
            assert self.proc.poll() is None, f"the run ended before {what}:\n{self.output()}"
            assert time.monotonic() < deadline, f"no {what} within {TIMEOUT:.0f} s:\n{self.output()}"
            time.sleep(0.05)
        return found

    def pgbouncer(self) -> Container | None:
        return next((c for c in self.containers() if "-pgbouncer" in str(c.name)), None)

    def probing(self) -> Container | None:
        """The PgBouncer container while a probe's client runs a statement or a transaction through it (a backend
        of the probes' role not idle: between probes, PgBouncer's server connections are)."""
        pg = next((c for c in self.containers() if re.fullmatch(r"leakcheck-\w+-pg[\d.]+", str(c.name))), None)
        bouncer = self.pgbouncer()
        if pg is None or bouncer is None:
            return None
        try:
            rows = pg.top()["Processes"] or []
        except docker.errors.APIError:
            return None
        titles = [row[-1] for row in rows]
        return bouncer if any("postgres: leakcheck_app " in t and not t.endswith(" idle") for t in titles) else None

    def wait(self) -> int:
        try:
            return self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run did not end within {TIMEOUT:.0f} s:\n{self.output()}")

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def stop(self) -> None:
        """After a failed test: the run killed and what it left removed."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        label = {"label": f"{OWNER_LABEL}={self.owner}"}
        for container in self.engine.containers.list(all=True, filters=label):
            container.remove(force=True)
        for network in self.engine.networks.list(filters=label):
            network.remove()


def _env(tmp: Path) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")} | {"TMPDIR": str(tmp)}


@pytest.fixture
def runs(client: DockerClient, images: list[str], tmp_path: Path) -> Iterator[Callable[..., Run]]:
    started: list[Run] = []
    tmp = tmp_path / "tmp"
    tmp.mkdir()

    def start(*args: str) -> Run:
        started.append(Run(client, tmp, tmp_path / f"run{len(started)}.txt", [*images, *args]))
        return started[-1]

    yield start
    for run in started:
        run.stop()


def _sweep(tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leakcheck.cli.main", "sweep"], env=_env(tmp), capture_output=True,
                          text=True, timeout=TIMEOUT, check=False)


def test_leakcheck_killed_mid_run_leaves_no_container_or_network_once_swept_and_a_live_runs_stay(
    client: DockerClient, runs: Callable[..., Run],
) -> None:
    live = client.networks.create(f"leakcheck-test-live-{os.getpid()}", labels={
        RUN_LABEL: "0live000", OWNER_LABEL: f"{socket.gethostname()}:{os.getpid()}"})  # this process: alive
    try:
        run = runs(*PROBES)
        run.until(run.probing, "a probe through PgBouncer's container")
        run.proc.send_signal(signal.SIGKILL)
        run.proc.wait()
        left = _owned_by(client, run.owner)
        assert any("pgbouncer" in thing for thing in left) and any("network" in thing for thing in left), left

        swept = _sweep(run.tmp)

        assert swept.returncode == 0, swept.stderr
        assert _owned_by(client, run.owner) == [], swept.stdout
        said = [line for line in swept.stdout.splitlines() if f"killed run (pid {run.proc.pid})" in line]
        assert len(said) == 1 and all(thing in said[0] for thing in left), swept.stdout
        assert [n.name for n in client.networks.list(filters={"label": f"{RUN_LABEL}=0live000"})] == [live.name]
    finally:
        live.remove()


def _outcomes(path: Path) -> dict[str, tuple[str, str]]:
    """Each probe's verdict and evidence, from a --results file."""
    return {o["probe"]: (o["verdict"], o["evidence"]) for o in json.loads(path.read_text())["outcomes"]}


@pytest.fixture(scope="module")
def clean_verdicts(client: DockerClient, images: list[str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each probe's verdict in a run without a fault."""
    tmp = tmp_path_factory.mktemp("clean")
    run = Run(client, tmp, tmp / "run.txt", [*images, *PROBES, f"--results={tmp / 'clean.json'}"])
    try:
        assert run.wait() in (0, 1), run.output()
    finally:
        run.stop()
    verdicts = {probe: verdict for probe, (verdict, _) in _outcomes(tmp / "clean.json").items()}
    assert "error" not in verdicts.values(), run.output()
    return verdicts


#: How PgBouncer's container is hit, and how the probe in flight says it.
HITS = {"docker-kill": "its container exited with code 137", "sigstop": "it is stopped (SIGSTOP): it cannot answer"}


@pytest.mark.parametrize("hit", HITS)
def test_a_pooler_container_killed_or_stopped_mid_probe_is_an_error_then_a_new_container_and_leaves_nothing(
    hit: str, client: DockerClient, runs: Callable[..., Run], clean_verdicts: dict[str, str], tmp_path: Path,
) -> None:
    run = runs(*PROBES, f"--results={tmp_path / 'hit.json'}")
    container = run.until(run.probing, "a probe through PgBouncer's container")
    if hit == "docker-kill":
        container.kill()
    else:
        container.reload()
        os.kill(int(container.attrs["State"]["Pid"]), signal.SIGSTOP)
    assert run.wait() in (0, 1), run.output()

    got = _outcomes(tmp_path / "hit.json")
    assert got.keys() == clean_verdicts.keys(), run.output()
    assert all(got[probe][0] in ("error", verdict) for probe, verdict in clean_verdicts.items()), got
    # The probe it hit is the error, naming the container and how it ended; the next use had a new container.
    said = [evidence for verdict, evidence in got.values() if verdict == "error"]
    assert len(said) == 1 and f"{HITS[hit]} (during the probe" in said[0], got
    assert _owned_by(client, run.owner) == []


def test_a_port_published_beyond_127_0_0_1_is_a_start_error_and_the_container_is_stopped(
    client: DockerClient, request: pytest.FixtureRequest,
) -> None:
    image = (_template(request.config, "leakcheck_pg_image", "LEAKCHECK_PG_IMAGE") or "postgres:{version}").format(
        version="16", major="16")
    containers = Engine()
    try:
        container = (DockerContainer(image).with_name(f"leakcheck-{containers.run_id}-wide")
                     .with_kwargs(entrypoint=["sleep"], labels=dict(containers.labels)).with_command(["60"]))
        # 127.0.0.1 as leakcheck asks, and one more address (loopback, yet not 127.0.0.1: nothing else may be)
        cast(dict[str, Any], container.ports)["5432/tcp"] = [("127.0.0.1", None), ("127.0.0.2", None)]
        containers.start(container, "a container")
        with pytest.raises(StartError, match=r"^a container is published on 5432/tcp on 127\.0\.0\.2:\d+, beyond "
                                             r"127\.0\.0\.1: stopped it; .*report this$"):
            containers.published_port(container, 5432, "a container")
        assert containers.state(container)[0] == "exited"
    finally:
        assert containers.close(remove_built=False) == []
    assert _owned_by(client, containers.run_id, RUN_LABEL) == []
