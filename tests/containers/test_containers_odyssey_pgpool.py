"""Odyssey and pgpool-II on the containers backend, against a real Docker engine (skipped when none
answers, or when no image is named).

Images come from the templates a user gives: --odyssey-image / --pgpool-image when given, else
$LEAKCHECK_ODYSSEY_IMAGE / $LEAKCHECK_PGPOOL_IMAGE (scripts/ci-docker.sh run sets both to its local
images, built from docker/odyssey and docker/pgpool).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

docker = pytest.importorskip("docker")
pytest.importorskip("testcontainers")
if TYPE_CHECKING:
    from docker.client import DockerClient

import psycopg  # noqa: E402

from leakcheck.model.errors import ProvisionError, StartError  # noqa: E402
from leakcheck.model.pool_settings import PoolMode, PoolSettings  # noqa: E402
from leakcheck.model.target import Pooler, PoolerKind  # noqa: E402
from leakcheck.model.versions import Version, parse_spec  # noqa: E402
from leakcheck.provision.base import Endpoint  # noqa: E402
from leakcheck.provision.containers.backend import ContainersBackend  # noqa: E402
from leakcheck.provision.odyssey.process import console, console_rows  # noqa: E402
from tests.containers.test_containers_backend import _engine_or_skip, _leftovers, _template  # noqa: E402

pytestmark = pytest.mark.containers

#: Both proofs of a server connection, read in one statement (as leakcheck's probes do).
IDENTITY = "SELECT pg_backend_pid(), (pg_stat_get_activity(pg_backend_pid())).backend_start"
#: (kind, version asked for, the pool mode the runner gives it): pgpool-II has only session pooling.
POOLERS = [(PoolerKind.ODYSSEY, "1.5", PoolMode.TRANSACTION), (PoolerKind.PGPOOL, "4.3", PoolMode.SESSION),
           (PoolerKind.PGPOOL, "4.7", PoolMode.SESSION)]
IDS = ["odyssey1.5", "pgpool4.3", "pgpool4.7"]


@pytest.fixture(scope="module")
def engine() -> Iterator[DockerClient]:
    client = _engine_or_skip()
    yield client
    client.close()


@pytest.fixture(scope="module")
def images(request: pytest.FixtureRequest) -> dict[str, Any]:
    odyssey = _template(request.config, "leakcheck_odyssey_image", "LEAKCHECK_ODYSSEY_IMAGE")
    pgpool = _template(request.config, "leakcheck_pgpool_image", "LEAKCHECK_PGPOOL_IMAGE")
    if not odyssey or not pgpool:
        pytest.skip("give --odyssey-image and --pgpool-image (or LEAKCHECK_ODYSSEY_IMAGE and LEAKCHECK_PGPOOL_IMAGE; "
                    "scripts/ci-docker.sh run sets them)")
    pg = _template(request.config, "leakcheck_pg_image", "LEAKCHECK_PG_IMAGE") or "postgres:{version}"
    return {"pg_image": pg, "odyssey_image": odyssey, "pgpool_image": pgpool}


@pytest.fixture(scope="module")
def make_backend(engine: DockerClient, images: dict[str, Any]) -> Callable[..., ContainersBackend]:
    def make(**kwargs: Any) -> ContainersBackend:
        return ContainersBackend(**{**images, **kwargs})

    return make


@pytest.fixture(scope="module")
def backend(make_backend: Callable[..., ContainersBackend]) -> Iterator[ContainersBackend]:
    with make_backend() as running:
        yield running


@pytest.fixture(scope="module")
def pg16(backend: ContainersBackend) -> Version:
    return backend.resolve_pg(parse_spec("16", "--pg"))


def _pooler(backend: ContainersBackend, kind: PoolerKind, raw: str, *settings: tuple[str, str]) -> Pooler:
    return Pooler(kind, backend.resolve_pooler(kind, parse_spec(raw, "--pooler")), tuple(settings))


def _identity(endpoint: Endpoint, user: str = "leakcheck_app") -> tuple[Any, ...]:
    with psycopg.connect(endpoint.as_user(user).conninfo(), autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(IDENTITY).fetchone()
    assert row is not None
    return tuple(row)


def _published(container: Any) -> int | None:
    bindings = container.attrs["NetworkSettings"]["Ports"].get("6432/tcp") or []
    return int(bindings[0]["HostPort"]) if bindings else None


def _containers(engine: DockerClient, backend: ContainersBackend, kind: PoolerKind) -> list[Any]:
    mine = {"label": f"org.leakcheck.run={backend.engine.run_id}"}
    return [c for c in engine.containers.list(all=True, filters=mine) if f"-{kind.value}" in c.name]


@pytest.mark.parametrize(("kind", "raw", "mode"), POOLERS, ids=IDS)
def test_each_pooler_resolves_to_the_exact_release_its_image_prints(
    backend: ContainersBackend, kind: PoolerKind, raw: str, mode: PoolMode
) -> None:
    version = _pooler(backend, kind, raw).version
    assert version is not None and version.parts[:2] == Version.parse(raw).parts and len(version.parts) == 3
    assert any(line.startswith(f"{kind.product} {version}: image ") for line in backend.describe())


@pytest.mark.parametrize(("kind", "raw", "mode"), POOLERS, ids=IDS)
def test_each_pooler_answers_as_the_app_role_through_a_port_published_on_127_0_0_1(
    backend: ContainersBackend, engine: DockerClient, pg16: Version, kind: PoolerKind, raw: str, mode: PoolMode
) -> None:
    with backend.pooler(pg16, _pooler(backend, kind, raw), PoolSettings(mode, 2)) as endpoint:
        assert endpoint.host == "127.0.0.1"
        with psycopg.connect(endpoint.as_user("leakcheck_app").conninfo(), autocommit=True) as conn:
            row = conn.execute("SELECT current_user, current_database(), current_setting('server_version_num')")
            assert row.fetchone() == ("leakcheck_app", "leakcheck", f"{pg16.parts[0]}{pg16.parts[1]:04d}")
    bindings = [b for c in _containers(engine, backend, kind) for b in c.attrs["NetworkSettings"]["Ports"]["6432/tcp"]]
    assert bindings and {b["HostIp"] for b in bindings} == {"127.0.0.1"}


@pytest.mark.parametrize(("kind", "raw", "mode"), POOLERS, ids=IDS)
def test_each_use_starts_from_fresh_server_identities(
    backend: ContainersBackend, pg16: Version, kind: PoolerKind, raw: str, mode: PoolMode
) -> None:
    pooler = _pooler(backend, kind, raw)
    seen = []
    for _ in range(2):
        with backend.pooler(pg16, pooler, PoolSettings(mode, 1), lane="fresh") as endpoint:
            # Two sessions one after another in a pool of one: the same server connection serves both.
            first, again = _identity(endpoint), _identity(endpoint)
            assert first == again
            seen.append(first)
    assert seen[0] != seen[1]


def test_two_clients_of_an_odyssey_transaction_pool_of_one_share_one_server_connection(
    backend: ContainersBackend, pg16: Version
) -> None:
    odyssey = _pooler(backend, PoolerKind.ODYSSEY, "1.5")
    with (
        backend.pooler(pg16, odyssey, PoolSettings(PoolMode.TRANSACTION, 1)) as endpoint,
        psycopg.connect(endpoint.as_user("leakcheck_app").conninfo(), autocommit=True) as a,
        psycopg.connect(endpoint.as_user("leakcheck_app").conninfo(), autocommit=True) as b,
    ):
        assert a.execute(IDENTITY).fetchone() == b.execute(IDENTITY).fetchone()


def test_odyssey_s_console_answers_show_version_with_the_resolved_release(
    backend: ContainersBackend, pg16: Version
) -> None:
    odyssey = _pooler(backend, PoolerKind.ODYSSEY, "1.5")
    with backend.pooler(pg16, odyssey, PoolSettings()) as endpoint, console(endpoint) as conn:
        version = next(iter(console_rows(conn, "SHOW VERSION")[0].values()))
    assert version.startswith(f"odyssey {odyssey.version}")


def test_pgpool_answers_pgpool_show_port_with_the_port_inside_its_container(
    backend: ContainersBackend, pg16: Version
) -> None:
    pgpool = _pooler(backend, PoolerKind.PGPOOL, "4.3")
    with (
        backend.pooler(pg16, pgpool, PoolSettings(PoolMode.SESSION, 2)) as endpoint,
        psycopg.connect(endpoint.conninfo(), autocommit=True) as conn,
    ):
        assert conn.execute("PGPOOL SHOW port").fetchone() == ("6432",)


def test_an_extra_pgpool_setting_is_applied_and_one_it_does_not_know_is_the_start_error(
    backend: ContainersBackend, engine: DockerClient, pg16: Version
) -> None:
    known = _pooler(backend, PoolerKind.PGPOOL, "4.3", ("log_connections", "on"))
    with (
        backend.pooler(pg16, known, PoolSettings(PoolMode.SESSION, 2)) as endpoint,
        psycopg.connect(endpoint.conninfo(), autocommit=True) as conn,
    ):
        assert conn.execute("PGPOOL SHOW log_connections").fetchone() == ("on",)
    unknown = _pooler(backend, PoolerKind.PGPOOL, "4.3", ("no_such_setting", "1"))
    before = {c.name for c in _containers(engine, backend, PoolerKind.PGPOOL)}
    refused = "PGPOOL SHOW no_such_setting answered: .*ignores settings it does not know"
    with pytest.raises(StartError, match=refused), backend.pooler(pg16, unknown, PoolSettings(PoolMode.SESSION, 2)):
        pass
    assert {c.name for c in _containers(engine, backend, PoolerKind.PGPOOL)} == before  # the failed one is gone


def test_an_odyssey_setting_it_does_not_know_is_its_own_start_error_with_its_log(
    backend: ContainersBackend, pg16: Version
) -> None:
    unknown = _pooler(backend, PoolerKind.ODYSSEY, "1.5", ("no_such_setting", "1"))
    own = (r"did not start: its container exited with code \d+: .*unknown parameter "
           r"\(Odyssey counts lines from 0: `no_such_setting 1`\)")
    with pytest.raises(StartError, match=own) as info, backend.pooler(pg16, unknown, PoolSettings()):
        pass
    assert str(info.value).splitlines()[0].startswith(f"Odyssey {unknown.version} (")


def test_a_pooler_container_that_exited_is_started_again_on_its_next_use(
    backend: ContainersBackend, engine: DockerClient, pg16: Version
) -> None:
    pgpool = _pooler(backend, PoolerKind.PGPOOL, "4.7")
    settings = PoolSettings(PoolMode.SESSION, 2)
    with backend.pooler(pg16, pgpool, settings, lane="killed") as endpoint:
        before = _identity(endpoint)
    (killed,) = [c for c in _containers(engine, backend, PoolerKind.PGPOOL) if _published(c) == endpoint.port]
    killed.kill()
    with backend.pooler(pg16, pgpool, settings, lane="killed") as endpoint:
        assert _identity(endpoint) != before
    assert [_published(c) for c in _containers(engine, backend, PoolerKind.PGPOOL) if c.name == killed.name] == []


def test_an_image_holding_another_release_is_refused_naming_the_option(
    make_backend: Callable[..., ContainersBackend], images: dict[str, Any]
) -> None:
    fixed = images["pgpool_image"].format(version="4.7", major="4")  # a template that ignores the version
    with (
        make_backend(pgpool_image=fixed) as backend,
        pytest.raises(ProvisionError, match=r"holds pgpool-II 4\.7\.\d+, not pgpool-II 4\.3: fix --pgpool-image"),
    ):
        backend.resolve_pooler(PoolerKind.PGPOOL, parse_spec("4.3", "--pooler"))


def test_nothing_the_run_created_remains_after_exit(
    engine: DockerClient, make_backend: Callable[..., ContainersBackend]
) -> None:
    with make_backend() as backend:
        pg = backend.resolve_pg(parse_spec("16", "--pg"))
        for kind, raw, mode in POOLERS[:2]:
            with backend.pooler(pg, _pooler(backend, kind, raw), PoolSettings(mode, 2)) as endpoint:
                assert _identity(endpoint)[0] > 0
        run_id = backend.engine.run_id
        assert len(_leftovers(engine, run_id)) == 4  # postgres, odyssey, pgpool, their network
    assert _leftovers(engine, run_id) == []
