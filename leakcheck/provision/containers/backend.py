"""The containers backend: PostgreSQL and the poolers from Docker images (`--backend=containers`).

PostgreSQL comes from an image template, by default the official `postgres:{version}`.
PgBouncer comes from an image template the user names, or from leakcheck/pgbouncer:<version>,
built from the package's dockerfiles/pgbouncer/Dockerfile (a release tarball: local, or downloaded
and verified on the host as for the native backend) and kept for later runs. Odyssey and pgpool-II come from the
image templates the user names (containers/odyssey_pgpool.py). Each PostgreSQL runs on a private network
of this run, as `postgres`; pooler containers join that network; clients use ports published on
127.0.0.1.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import psycopg
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

from leakcheck.model.errors import ProvisionError, StartError, UsageError, one_line
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import Pooler, PoolerKind
from leakcheck.model.versions import Spec, Version, version_in_output
from leakcheck.provision.base import DBNAME, QUERY_SIZE, USER, Endpoint, PoolerKey, new_credentials
from leakcheck.provision.console import query_postgres
from leakcheck.provision.containers import images as img
from leakcheck.provision.containers.engine import LOOPBACK, RECIPE_LABEL, Engine, sigint_deferred, start_reaper
from leakcheck.provision.containers.fleet import ContainerFleet, MemberImage
from leakcheck.provision.containers.odyssey_pgpool import (
    CONTAINERS,
    PROGRAMS,
    OdysseyPgpoolContainer,
    OdysseyPgpoolImage,
    resolve_image,
)
from leakcheck.provision.containers.odyssey_pgpool_files import missing_image
from leakcheck.provision.host.system import cache_root, file_lock
from leakcheck.provision.pgbouncer import tarballs, team_ini
from leakcheck.provision.pgbouncer.admin import check_config, reset_pool, show_version
from leakcheck.provision.pgbouncer.download import fetch_release, release_url
from leakcheck.provision.pgbouncer.ini import harness_values
from leakcheck.provision.pgbouncer.releases import RELEASES, unknown_release
from leakcheck.provision.postgres import fixtures

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Image:
    name: str
    version: Version
    origin: str
    user: str | None = None  # who the server runs as, when not the image's own USER


@dataclass
class _Running:
    container: DockerContainer
    endpoint: Endpoint
    network: Network | None = None


class ContainersBackend:
    """Servers in Docker containers, removed when the backend exits (also on failure and Ctrl-C).

    Images leakcheck builds for PgBouncer are kept, tagged by version, for reuse by later runs;
    `keep_built_images=False` removes the ones this run built.
    """

    name = "containers"

    def __init__(
        self,
        pg_image: str = img.DEFAULT_PG_IMAGE,
        bouncer_image: str | None = None,
        bouncer_tarball_url: str = tarballs.UPSTREAM_TARBALL_URL,
        *,
        bouncer_base_image: str | None = None,
        bouncer_build_tag: str = img.DEFAULT_BUILD_TAG,
        keep_built_images: bool = True,
        start_timeout: float = 60.0,
        odyssey_image: str | None = None,
        pgpool_image: str | None = None,
        images: Mapping[PoolerKind, str] | None = None,
    ) -> None:
        """`images`: Config.images, each pooler kind's image template (the keyword arguments name the same)."""
        images = images or {}
        bouncer_image = bouncer_image or images.get(PoolerKind.PGBOUNCER)
        self._pg_template = img.check_template(pg_image, "--pg-image")
        self._bouncer_template = (
            img.check_template(bouncer_image, "--bouncer-image") if bouncer_image else None
        )
        self._tarball_url = img.check_template(bouncer_tarball_url, "bouncer_tarball_url")
        self._base_image = bouncer_base_image or os.environ.get(img.BASE_IMAGE_ENV) or img.DEFAULT_BASE_IMAGE
        self._build_tag = img.check_template(bouncer_build_tag, "bouncer_build_tag")
        self._keep_built = keep_built_images
        given = {**images, PoolerKind.ODYSSEY: odyssey_image or images.get(PoolerKind.ODYSSEY),
                 PoolerKind.PGPOOL: pgpool_image or images.get(PoolerKind.PGPOOL)}
        self._pooler_templates = {k: img.check_template(t, k.record.image_option) for k, t in given.items()
                                  if t and not k.record.image_built}
        self._timeout = start_timeout
        self._engine: Engine | None = None
        self._specs: dict[tuple[str, str], Version] = {}
        self._pg_images: dict[Version, _Image] = {}
        self._bouncer_images: dict[Version, _Image] = {}
        self._postgres: dict[Version, _Running] = {}
        self._bouncers: dict[tuple[Version, Pooler, PoolSettings, str], _Running] = {}
        self._odyssey_pgpool_images: dict[tuple[PoolerKind, Version], OdysseyPgpoolImage] = {}
        self._odyssey_pgpools: dict[tuple[Version, Pooler, PoolSettings, str], OdysseyPgpoolContainer] = {}
        self._fleets: dict[tuple[Version, Pooler, PoolSettings, str], ContainerFleet] = {}  # --bouncer-fleet
        self._lock = threading.RLock()  # lanes run in threads
        self._numbers = itertools.count()  # pooler container names: a replaced one never reuses a live one's
        self._credentials = new_credentials(USER, fixtures.APP_ROLE)  # this run's passwords (SCRAM)

    # --- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> ContainersBackend:
        engine = Engine()
        self._engine = engine
        try:
            engine.sweep_stale()
            start_reaper()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        engine, self._engine = self._engine, None
        if engine is None:
            return
        with sigint_deferred():
            for fleet in self._fleets.values():
                fleet.__exit__()
            problems = engine.close(remove_built=not self._keep_built)
        self._postgres.clear()
        self._bouncers.clear()
        self._odyssey_pgpools.clear()
        self._fleets.clear()
        for problem in problems:
            log.info(f"could not remove {problem}; remove it with docker rm/network rm/rmi")

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise StartError("the containers backend is used outside its `with` block")
        return self._engine

    # --- resolving ------------------------------------------------------------------------

    def resolve_pg(self, spec: Spec) -> Version:
        wanted = _version_only(spec, f"--pg={spec.raw}", "--pg=16", "--pg-image")
        key = ("pg", str(wanted))
        if key not in self._specs:
            name = img.image_name(self._pg_template, wanted, "--pg-image")
            self.engine.ensure_image(name, "--pg-image")
            exact = self._version_in(
                name, ["postgres", "--version"], None, wanted, "PostgreSQL", "--pg-image"
            )
            self._pg_images.setdefault(exact, _Image(name, exact, f"image {name}"))
            self._specs[key] = exact
        return self._specs[key]

    def resolve_pooler(self, kind: PoolerKind, spec: Spec) -> Version:
        if kind is PoolerKind.PGBOUNCER:
            return self.resolve_bouncer(spec)
        if kind not in PROGRAMS:
            raise UsageError(f"the containers backend cannot start {kind.product}")
        example = f"--pooler={kind.value}:{PROGRAMS[kind].example_spec}"
        wanted = _version_only(spec, f"--pooler={kind.value}:{spec.raw}", example, kind.record.image_option)
        key = (kind.value, str(wanted))
        if key not in self._specs:
            template = self._pooler_templates.get(kind)
            if template is None:
                raise missing_image(kind, spec)
            image = resolve_image(self.engine, kind, template, wanted)
            self._odyssey_pgpool_images.setdefault((kind, image.version), image)
            self._specs[key] = image.version
        return self._specs[key]

    def resolve_bouncer(self, spec: Spec) -> Version:
        wanted = _version_only(spec, f"--bouncer={spec.raw}", "--bouncer=1.24", "--bouncer-image")
        key = ("bouncer", str(wanted))
        if key not in self._specs:
            image = self._named_bouncer(wanted) if self._bouncer_template else self._built_bouncer(wanted)
            self._bouncer_images.setdefault(image.version, image)
            self._specs[key] = image.version
        return self._specs[key]

    def _named_bouncer(self, wanted: Version) -> _Image:
        name = img.image_name(cast(str, self._bouncer_template), wanted, "--bouncer-image")
        attrs = self.engine.ensure_image(name, "--bouncer-image")
        user = img.UNPRIVILEGED_USER if img.runs_as_root(str(attrs["Config"].get("User") or "")) else None
        exact = self._version_in(
            name, ["pgbouncer", "--version"], user, wanted, "PgBouncer", "--bouncer-image"
        )
        return _Image(name, exact, f"image {name}", user)

    def _built_bouncer(self, wanted: Version) -> _Image:
        local = tarballs.local_tarballs(os.environ.get(tarballs.TARBALLS_ENV))
        built = img.versions_in_tags(self._build_tag, self.engine.tags())
        exact = img.pick_build_version(wanted, [*local, *built], [r.version for r in RELEASES])
        if exact is None:
            raise UsageError(
                f"--bouncer={wanted}: {unknown_release(wanted)}; "
                f"or put pgbouncer-X.Y.Z.tar.gz in ${tarballs.TARBALLS_ENV}, or name an image with --bouncer-image"
            )
        tag = img.image_name(self._build_tag, exact, "bouncer_build_tag")
        recipe = hashlib.sha256(img.pgbouncer_dockerfile()).hexdigest()[:16]
        with file_lock(cache_root() / "locks" / f"pgbouncer-image-{exact}.lock"):
            attrs = self.engine.image_attrs(tag)
            labels = (attrs or {}).get("Config", {}).get("Labels") or {}
            if attrs is not None and labels.get(RECIPE_LABEL) in (None, recipe):
                return _Image(tag, exact, f"image {tag} (built earlier)")
            tarball = local.get(exact)
            source = tarball.name if tarball else f"{release_url(self._tarball_url, exact)} (sha256 verified)"
            self.engine.ensure_image(self._base_image, f"${img.BASE_IMAGE_ENV}")
            with (
                tempfile.TemporaryDirectory(prefix="leakcheck-build-") as context,
                tempfile.TemporaryDirectory(prefix="leakcheck-fetch-") as fetched,
            ):
                if tarball is None:  # downloaded and verified here: the image build never fetches
                    tarball = fetch_release(exact, self._tarball_url, Path(fetched))
                log.info(f"building {tag} from {source} on {self._base_image} (about a minute)")
                img.write_build_context(Path(context), exact, tarball)
                args = img.build_args(exact, self._base_image, self._tarball_url)
                self.engine.build(Path(context), tag, args, recipe)
        return _Image(tag, exact, f"image {tag} (built now from {source})")

    def _version_in(
        self, image: str, argv: list[str], user: str | None, wanted: Version, what: str, option: str
    ) -> Version:
        output = self.engine.run_once(image, argv, user)
        exact = version_in_output(output)
        if exact is None or not wanted.matches(exact):
            found = f"{what} {exact}" if exact else f"no version in {one_line(output, 80)!r}"
            raise ProvisionError(f"image {image} holds {found}, not {what} {wanted}: fix {option}")
        return exact

    # --- servers --------------------------------------------------------------------------

    def postgres(self, pg: Version) -> Endpoint:
        return self._running_pg(pg).endpoint

    def _running_pg(self, pg: Version) -> _Running:
        if pg in self._postgres:
            return self._postgres[pg]
        image = self._pg_images.get(pg) or self._pg_images[self.resolve_pg(Spec(str(pg), version=pg))]
        what = f"PostgreSQL {pg} ({image.name})"
        network = self.engine.network(f"pg{pg}")
        container = (
            DockerContainer(image.name)
            .with_name(f"leakcheck-{self.engine.run_id}-pg{pg}")
            .with_network(network)
            .with_network_aliases(img.PG_ALIAS)
            .with_envs(POSTGRES_USER=USER, POSTGRES_DB=DBNAME, POSTGRES_PASSWORD=dict(self._credentials)[USER])
            .with_command(["postgres", "-c", "fsync=off", "-c", f"track_activity_query_size={QUERY_SIZE}"])
            .with_kwargs(labels=dict(self.engine.labels))
        )
        running = self._start(container, what, img.PG_PORT, network)
        self._postgres[pg] = running
        self._wait_ready(running, what, query_postgres)
        with psycopg.connect(running.endpoint.conninfo(), autocommit=True, connect_timeout=10) as conn:
            fixtures.apply(conn)
            fixtures.set_passwords(conn, self._credentials)
        return running

    @contextlib.contextmanager
    def pooler(self, pg: Version, pooler: Pooler, settings: PoolSettings, lane: str = "") -> Iterator[Endpoint]:
        key = (pg, pooler, settings, lane)
        if pooler.kind is not PoolerKind.PGBOUNCER:
            yield self._odyssey_pgpool(key)
            return
        if pooler.fleet:
            fleet = self._fleet(key)
            yield fleet.endpoint()
            _check_fleet(fleet, pooler, settings)  # a fleet that lost a process during the probe: an error naming it
            return
        with self._lock:
            running = self._bouncers.get(key)
        if running is not None and (down := self.engine.down(running.container)) is not None:
            log.info(f"{pooler.label()} in front of PostgreSQL {pg}: {down}; starting a new one")
            self.engine.remove(running.container)
            running = None
        if running is None:
            with self._lock:
                running = self._start_bouncer(pg, pooler, settings, next(self._numbers))
                self._bouncers[key] = running
        reset_pool(running.endpoint)
        yield running.endpoint

    def gone(self, pg: Version, pooler: PoolerKey | None = None) -> str | None:
        """Why a container a probe on PostgreSQL `pg` (through `pooler`, the key of the pooler it uses) depends on
        no longer serves (Engine.down; any container of a fleet), else None: the runner's watcher (run/watch.py)
        asks it every 0.1 s while a probe runs, and once after it, so that a pooler killed mid-probe is an
        error, never a verdict."""
        server = self._postgres.get(pg)
        if server is not None and (down := self.engine.down(server.container)) is not None:
            return f"PostgreSQL {pg} at {LOOPBACK}:{server.endpoint.port}: {down}"
        if pooler is None:
            return None
        _, used, settings, _ = pooler
        what = f"{used.kind.product} {used.label()} ({settings.mode.value} pool of {settings.pool_size})"
        fleet = self._fleets.get(pooler)  # (no lock: a lane may hold it while it starts a pooler)
        if fleet is not None:
            lost = fleet.lost()
            return None if lost is None else f"{what}: {lost}"
        running = self._bouncers.get(pooler) or self._odyssey_pgpools.get(pooler)
        down = self.engine.down(running.container) if running is not None else None
        return None if down is None or running is None else f"{what} at {LOOPBACK}:{running.endpoint.port}: {down}"

    def _fleet(self, key: tuple[Version, Pooler, PoolSettings, str]) -> ContainerFleet:
        """The PgBouncer fleet for this key (started on first use, kept while all its processes run), reset."""
        pg, pooler, settings, _ = key
        with self._lock:
            fleet = self._fleets.get(key)
            if fleet is None:
                images = []
                for version in pooler.fleet:
                    if version not in self._bouncer_images:
                        self.resolve_bouncer(Spec(str(version), version=version))
                    image = self._bouncer_images[version]
                    images.append(MemberImage(image.name, image.version, image.user))
                team = team_ini.load(pooler.config) if pooler.config else None
                name = f"leakcheck-{self.engine.run_id}-fleet-pg{pg}-{next(self._numbers)}"
                fleet = ContainerFleet(self.engine, tuple(images), settings, pooler.settings, team, self._credentials,
                                       cast(Network, self._running_pg(pg).network), name, self._timeout)
                fleet.__enter__()
                self._fleets[key] = fleet
        _check_fleet(fleet, pooler, settings)
        fleet.reset()
        return fleet

    def _odyssey_pgpool(self, key: tuple[Version, Pooler, PoolSettings, str]) -> Endpoint:
        """An Odyssey or pgpool-II container for this key (started on first use), reset for this use."""
        pg, pooler, settings, _ = key
        with self._lock:
            running = self._odyssey_pgpools.get(key)
            if running is not None and (down := self.engine.down(running.container)) is not None:
                log.info(f"{pooler.label()} in front of PostgreSQL {pg}: {down}; starting a new one")
                self.engine.remove(running.container)
                running = None
            if running is None:
                running = self._start_odyssey_pgpool(pg, pooler, settings)
                self._odyssey_pgpools[key] = running
        running.reset()  # e.g. Odyssey's restart: this use starts from fresh server connections
        return running.endpoint

    def _start_odyssey_pgpool(self, pg: Version, pooler: Pooler, settings: PoolSettings) -> OdysseyPgpoolContainer:
        assert pooler.version is not None
        if (pooler.kind, pooler.version) not in self._odyssey_pgpool_images:
            self.resolve_pooler(pooler.kind, Spec(str(pooler.version), version=pooler.version))
        image = self._odyssey_pgpool_images[(pooler.kind, pooler.version)]
        name = f"leakcheck-{self.engine.run_id}-{pooler.kind.value}{pooler.version}-pg{pg}-{next(self._numbers)}"
        network = cast(Network, self._running_pg(pg).network)
        running = CONTAINERS[pooler.kind](
            self.engine, image, settings, pooler.settings, self._credentials, network, name, self._timeout
        )
        try:
            running.start()
        except BaseException:
            self.engine.remove(running.container)
            raise
        return running

    def _start_bouncer(self, pg: Version, pooler: Pooler, settings: PoolSettings, n: int) -> _Running:
        server = self._running_pg(pg)
        assert pooler.version is not None
        bouncer = pooler.version
        if bouncer not in self._bouncer_images:
            self.resolve_bouncer(Spec(str(bouncer), version=bouncer))
        image = self._bouncer_images[bouncer]
        what = f"PgBouncer {bouncer} ({image.name}, {settings.mode.value} pool of {settings.pool_size})"
        kwargs: dict[str, Any] = {"labels": dict(self.engine.labels), "entrypoint": ["pgbouncer"]}
        if image.user:
            kwargs["user"] = image.user
        container = (
            DockerContainer(image.name)
            .with_name(f"leakcheck-{self.engine.run_id}-pgbouncer{bouncer}-pg{pg}-{n}")
            .with_network(cast(Network, server.network))
            .with_command([f"{img.CONFIG_DIR}/pgbouncer.ini"])
            .with_kwargs(**kwargs)
        )
        team = team_ini.load(pooler.config) if pooler.config else None
        for path, data in img.bouncer_files(settings, self._credentials, pooler.settings, team).items():
            container.with_copy_into_container(data, path, 0o644)
        running = self._start(container, what, img.BOUNCER_PORT, None)
        try:
            self._wait_ready(running, what, show_version)
            check_config(running.endpoint, harness_values(settings, img.bouncer_layout()),
                         f"{img.CONFIG_DIR}/pgbouncer.ini in {what}")
        except BaseException:
            self.engine.remove(running.container)
            raise
        return running

    def _start(self, container: DockerContainer, what: str, port: int, network: Network | None) -> _Running:
        host_port = self.engine.start_published(container, what, port)
        return _Running(container, Endpoint(LOOPBACK, host_port, credentials=self._credentials), network)

    def _wait_ready(self, running: _Running, what: str, check: Callable[[Endpoint], object]) -> None:
        def ready() -> str | None:
            try:
                check(running.endpoint)
                return None
            except (psycopg.Error, StartError) as exc:
                return one_line(exc, 160)

        self.engine.wait_ready(running.container, what, ready, self._timeout)

    def describe(self) -> Iterator[str]:
        ryuk = "off" if testcontainers_config.ryuk_disabled else "on"
        where = os.environ.get("DOCKER_HOST") or "the default socket"
        yield f"containers backend: Docker engine at {where}, Ryuk {ryuk}"
        for kind, images in (("PostgreSQL", self._pg_images), ("PgBouncer", self._bouncer_images)):
            for image in images.values():
                yield f"{kind} {image.version}: {image.origin}"
        for (pooler_kind, version), pooler_image in sorted(self._odyssey_pgpool_images.items()):
            yield f"{pooler_kind.product} {version}: {pooler_image.origin}"

    def warm(self, pgs: Sequence[Version], poolers: Sequence[PoolerKey]) -> None:
        """Nothing: each container starts at its first use."""


def _check_fleet(fleet: ContainerFleet, pooler: Pooler, settings: PoolSettings) -> None:
    lost = fleet.lost()
    if lost is not None:
        what = f"PgBouncer {pooler.label()} ({settings.mode.value} pool of {settings.pool_size})"
        raise StartError(f"{what}: {lost}")


def _version_only(spec: Spec, given: str, example: str, images: str) -> Version:
    if spec.version is None:
        raise UsageError(
            f"{given}: the containers backend takes versions (e.g. {example}) and images from "
            f"{images} templates; paths to binaries are for --backend=native"
        )
    return spec.version
