"""The containers backend against a real Docker engine (skipped when none answers).

Images come from the same templates a user gives: --pg-image / --bouncer-image when given, else
$LEAKCHECK_PG_IMAGE / $LEAKCHECK_BOUNCER_IMAGE (scripts/ci-docker.sh run sets both to its local
images), else postgres:{version} and a PgBouncer image built from the package's Dockerfile.
"""

from __future__ import annotations

import io
import os
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
from leakcheck.provision.base import OTHER_ROLE, Endpoint  # noqa: E402
from leakcheck.provision.containers.backend import ContainersBackend  # noqa: E402
from leakcheck.provision.containers.engine import connect  # noqa: E402

pytestmark = pytest.mark.containers

POOL_OF_ONE = PoolSettings(PoolMode.TRANSACTION, 1)


def _engine_or_skip() -> DockerClient:
    try:
        connect().client.close()  # fails fast, without leaving the SDK's socket open
    except ProvisionError as exc:
        pytest.skip(f"{exc}; scripts/ci-docker.sh start runs one")
    client = docker.from_env()
    client.ping()
    return client


def _template(config: pytest.Config, option: str, env: str) -> str | None:
    given = config.getoption(option, default=None) if hasattr(config.option, option) else None
    return str(given or os.environ.get(env) or "") or None


@pytest.fixture(scope="module")
def engine() -> Iterator[DockerClient]:
    client = _engine_or_skip()
    yield client
    client.close()


@pytest.fixture(scope="module")
def pg_image(request: pytest.FixtureRequest) -> str:
    return _template(request.config, "leakcheck_pg_image", "LEAKCHECK_PG_IMAGE") or "postgres:{version}"


@pytest.fixture(scope="module")
def bouncer_image(request: pytest.FixtureRequest) -> str | None:
    return _template(request.config, "leakcheck_bouncer_image", "LEAKCHECK_BOUNCER_IMAGE")


@pytest.fixture(scope="module")
def bouncer_spec(bouncer_image: str | None) -> str:
    return "1.24" if bouncer_image else "1.24.1"  # building needs an exact release


@pytest.fixture(scope="module")
def make_backend(
    engine: DockerClient, pg_image: str, bouncer_image: str | None
) -> Callable[..., ContainersBackend]:
    def make(**kwargs: Any) -> ContainersBackend:
        options: dict[str, Any] = {"pg_image": pg_image, "bouncer_image": bouncer_image}
        return ContainersBackend(**{**options, **kwargs})

    return make


@pytest.fixture(scope="module")
def backend(make_backend: Callable[..., ContainersBackend]) -> Iterator[ContainersBackend]:
    with make_backend() as running:
        yield running


@pytest.fixture(scope="module")
def pg16(backend: ContainersBackend) -> Version:
    return backend.resolve_pg(parse_spec("16", "--pg"))


@pytest.fixture(scope="module")
def bouncer124(backend: ContainersBackend, bouncer_spec: str) -> Pooler:
    version = backend.resolve_pooler(PoolerKind.PGBOUNCER, parse_spec(bouncer_spec, "--bouncer"))
    return Pooler(PoolerKind.PGBOUNCER, version)


def _pid(endpoint: Endpoint) -> int:
    with psycopg.connect(endpoint.conninfo(), autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


def _leftovers(engine: DockerClient, run_id: str) -> list[str]:
    label = {"label": f"org.leakcheck.run={run_id}"}
    containers = [c.name for c in engine.containers.list(all=True, filters=label)]
    networks = [n.name for n in engine.networks.list(filters=label)]
    return containers + networks


def test_versions_resolve_to_exact_releases(pg16: Version, bouncer124: Pooler) -> None:
    assert pg16.parts[0] == 16 and len(pg16.parts) >= 2
    assert bouncer124.version is not None
    assert bouncer124.version.parts[:2] == (1, 24) and len(bouncer124.version.parts) == 3


def test_postgres_16_answers_through_a_port_published_on_127_0_0_1(
    backend: ContainersBackend, pg16: Version, engine: DockerClient
) -> None:
    endpoint = backend.postgres(pg16)
    assert endpoint.host == "127.0.0.1"
    with psycopg.connect(endpoint.conninfo(), autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT current_setting('server_version_num')::int / 10000, current_user, current_database(),"
            " pg_has_role(current_user, %s, 'MEMBER')",
            (OTHER_ROLE,),
        ).fetchone()
    assert row == (16, "leakcheck", "leakcheck", True)
    bindings = [
        binding
        for container in engine.containers.list(
            filters={"label": f"org.leakcheck.run={backend.engine.run_id}"}
        )
        for binding in (container.attrs["NetworkSettings"]["Ports"].get("5432/tcp") or [])
    ]
    assert bindings and {b["HostIp"] for b in bindings} == {"127.0.0.1"}


def test_postgres_is_started_once_per_run(backend: ContainersBackend, pg16: Version) -> None:
    assert backend.postgres(pg16) == backend.postgres(pg16)


def test_pgbouncer_1_24_answers_show_version_on_its_admin_console(
    backend: ContainersBackend, pg16: Version, bouncer124: Pooler
) -> None:
    with backend.pooler(pg16, bouncer124, POOL_OF_ONE) as endpoint:
        admin = psycopg.connect(endpoint.conninfo("pgbouncer"), autocommit=True)
        with admin:
            result = admin.pgconn.exec_(b"SHOW VERSION")
            text = (result.get_value(0, 0) or b"").decode()
    assert text.startswith(f"PgBouncer {bouncer124.version}")


def test_two_clients_of_a_transaction_pool_of_one_share_one_server_backend(
    backend: ContainersBackend, pg16: Version, bouncer124: Pooler
) -> None:
    with (
        backend.pooler(pg16, bouncer124, POOL_OF_ONE) as endpoint,
        psycopg.connect(endpoint.conninfo(), autocommit=True) as a,
        psycopg.connect(endpoint.conninfo(), autocommit=True) as b,
    ):
        # Client A runs a transaction, then client B runs one: one server connection serves both.
        pid_a = a.execute("SELECT pg_backend_pid()").fetchone()
        pid_b = b.execute("SELECT pg_backend_pid()").fetchone()
    assert pid_a is not None and pid_a == pid_b


def test_each_use_of_a_bouncer_starts_with_fresh_server_connections(
    backend: ContainersBackend, pg16: Version, bouncer124: Pooler
) -> None:
    pids = []
    for _ in range(2):
        with backend.pooler(pg16, bouncer124, POOL_OF_ONE) as endpoint:
            pids.append(_pid(endpoint))
    assert pids[0] != pids[1]


def test_other_pool_settings_get_their_own_pgbouncer(
    backend: ContainersBackend, pg16: Version, bouncer124: Pooler
) -> None:
    with backend.pooler(pg16, bouncer124, POOL_OF_ONE) as transaction:
        pass
    with backend.pooler(pg16, bouncer124, PoolSettings(PoolMode.SESSION, 2)) as session:
        assert session.port != transaction.port
        assert _pid(session) > 0


def test_describe_names_each_image_and_version(
    backend: ContainersBackend, pg16: Version, bouncer124: Pooler
) -> None:
    lines = list(backend.describe())
    assert any(line.startswith(f"PostgreSQL {pg16}: image ") for line in lines)
    assert any(line.startswith(f"PgBouncer {bouncer124.version}: image ") for line in lines)


def test_nothing_the_run_created_remains_after_exit(
    engine: DockerClient, make_backend: Callable[..., ContainersBackend], bouncer_spec: str
) -> None:
    with make_backend() as backend:
        pg = backend.resolve_pg(parse_spec("16", "--pg"))
        bouncer = Pooler(PoolerKind.PGBOUNCER, backend.resolve_bouncer(parse_spec(bouncer_spec, "--bouncer")))
        with backend.pooler(pg, bouncer, POOL_OF_ONE) as endpoint:
            assert _pid(endpoint) > 0
        run_id = backend.engine.run_id
        assert len(_leftovers(engine, run_id)) == 3  # postgres, pgbouncer, their network
    assert _leftovers(engine, run_id) == []


def test_nothing_the_run_created_remains_after_a_failure(
    engine: DockerClient, make_backend: Callable[..., ContainersBackend]
) -> None:
    with pytest.raises(RuntimeError, match="probe blew up"), make_backend() as backend:
        run_id = backend.engine.run_id
        backend.postgres(backend.resolve_pg(parse_spec("16", "--pg")))
        raise RuntimeError("probe blew up")
    assert _leftovers(engine, run_id) == []


def test_an_image_that_cannot_be_pulled_is_a_one_line_provision_error(
    make_backend: Callable[..., ContainersBackend],
) -> None:
    expected = "no-such-postgres:16 .* choose another image with --pg-image"
    with (
        make_backend(pg_image="leakcheck-test/no-such-postgres:{version}") as backend,
        pytest.raises(ProvisionError, match=expected) as info,
    ):
        backend.resolve_pg(parse_spec("16", "--pg"))
    assert "\n" not in str(info.value)


def test_a_server_whose_container_exits_is_reported_with_its_log(
    engine: DockerClient, make_backend: Callable[..., ContainersBackend], pg_image: str
) -> None:
    base = pg_image.format(version="16", major="16")
    dockerfile = (
        f'FROM {base}\nENTRYPOINT ["sh", "-c", "echo leakcheck-test-broken-start >&2; exit 3", "--"]\n'
    )
    tag = "leakcheck-test/broken-postgres:16"
    engine.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True)
    try:
        with make_backend(pg_image="leakcheck-test/broken-postgres:{version}", start_timeout=20) as broken:
            pg = broken.resolve_pg(parse_spec("16", "--pg"))
            with pytest.raises(StartError, match="exited with code 3") as info:
                broken.postgres(pg)
            assert "leakcheck-test-broken-start" in str(info.value)
            run_id = broken.engine.run_id
        assert _leftovers(engine, run_id) == []
    finally:
        engine.images.remove(tag, force=True)


@pytest.mark.timeout(900)
def test_pgbouncer_is_built_from_a_local_release_tarball_and_removed_when_not_kept(
    engine: DockerClient, make_backend: Callable[..., ContainersBackend]
) -> None:
    if not os.environ.get("LEAKCHECK_PGBOUNCER_TARBALLS"):
        pytest.skip("set LEAKCHECK_PGBOUNCER_TARBALLS to a folder holding pgbouncer-1.24.1.tar.gz")
    tag = "leakcheck-test/pgbouncer:1.24.1"
    build_tag = "leakcheck-test/pgbouncer:{version}"
    with make_backend(bouncer_image=None, bouncer_build_tag=build_tag, keep_built_images=False) as backend:
        bouncer = Pooler(PoolerKind.PGBOUNCER, backend.resolve_bouncer(parse_spec("1.24", "--bouncer")))
        assert bouncer.version == Version.parse("1.24.1")
        assert engine.images.get(tag).labels.get("org.leakcheck.recipe")
        pg = backend.resolve_pg(parse_spec("16", "--pg"))
        with backend.pooler(pg, bouncer, POOL_OF_ONE) as endpoint:
            assert _pid(endpoint) == _pid(endpoint)
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(tag)
