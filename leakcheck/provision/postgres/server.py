"""One PostgreSQL server for a run: an initdb template cached per version, copied and started per run."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Self

import psycopg
from psycopg import sql

from leakcheck.model.errors import StartError
from leakcheck.model.versions import Version
from leakcheck.provision.base import DBNAME, QUERY_SIZE, USER, Endpoint, new_credentials
from leakcheck.provision.host.owner import create, fresh_name
from leakcheck.provision.host.process import STOPPED, ServerProcess
from leakcheck.provision.host.strays import remove_folder, stop_servers_in
from leakcheck.provision.host.system import (
    PortClash,
    ServerUser,
    die_with_parent,
    file_lock,
    free_port,
    remove_entry,
    start_retrying_port_clash,
    unwritable,
)
from leakcheck.provision.host.sysv_shm import recorded_segment, remove_when_unused
from leakcheck.provision.postgres import fixtures
from leakcheck.provision.postgres.binaries import PgInstall

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
#: TCP needs a password (SCRAM); the Unix socket, in a folder only the server user may enter, trusts.
#: 1 MB WAL segments: a data copy per run is 15 MB smaller (and so faster) than with the default 16 MB.
_INITDB = ("--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--wal-segsize=1")
#: A template's name changes when what initdb or fixtures.py put in it changes.
_TEMPLATE_ID = hashlib.sha256(" ".join((*_INITDB, fixtures.FINGERPRINT)).encode()).hexdigest()[:10]
#: dynamic_shared_memory_type=mmap: parallel query's shared memory lives in the data dir (pg_dynshmem),
#: removed with it, instead of /dev/shm/PostgreSQL.* segments a killed server would leave behind.
#: track_activity_query_size: the witness must see the tag at the end of a long statement (base.QUERY_SIZE).
_SETTINGS = (
    "fsync=off", "synchronous_commit=off", "full_page_writes=off", "max_connections=300",
    "dynamic_shared_memory_type=mmap", f"track_activity_query_size={QUERY_SIZE}",
)


#: How PostgreSQL names a setting it refuses at start (its log's FATAL/LOG lines).
_REFUSED = re.compile(r'(unrecognized configuration parameter "[^"]+"|invalid value for parameter "[^"]+"[^\n]*'
                      r'|parameter "[^"]+" (?:requires|cannot be)[^\n]*)')


def refused_setting(log_text: str) -> str | None:
    """The first setting `log_text` (a postgres log) says it refused, in its own words, else None."""
    found = _REFUSED.search(log_text)
    return found.group(1).strip() if found else None


def _child_env() -> dict[str, str]:
    """Our environment without PG* variables, which would redirect initdb or postgres."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


#: What a starting server says that waiting cannot change.
_FOR_GOOD = re.compile(r'FATAL:\s+(database "[^"]+" does not exist)')


class _Postmaster:
    """A `postgres` on a data directory, on a free port; `stop()` is safe at any point."""

    def __init__(
        self, install: PgInstall, user: ServerUser, data: Path, rundir: Path, dbname: str, log: str
    ) -> None:
        self.install, self.user, self.data, self.rundir, self.dbname = install, user, data, rundir, dbname
        self.log = rundir / log
        self.port = 0
        self._process: ServerProcess | None = None

    def start(self) -> None:
        """Start on a free port and wait until the superuser can run `SELECT 1` on its socket."""
        self.port = free_port()
        argv = [str(self.install.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port),
                "-c", f"listen_addresses={HOST}", "-k", str(self.rundir / "sock")]
        for setting in _SETTINGS:
            argv += ["-c", setting]
        # SIGINT: PostgreSQL's fast shutdown. Its backends and its segment outlive a killed postmaster.
        self._process = ServerProcess(self.what, argv, self.user, self.rundir, self.log, env=_child_env(),
                                      stop_signal=signal.SIGINT, stop_timeout=STOP_TIMEOUT, forks=True)
        self._process.start(self._answers, READY_TIMEOUT, late="Is the machine overloaded?")

    def bad_setting(self) -> str | None:
        """The setting its log refuses (`unrecognized configuration parameter "x"`, `invalid value
        for parameter "x": ...`), in PostgreSQL's own words, else None."""
        return refused_setting(self.log_text())

    @property
    def what(self) -> str:
        return f"PostgreSQL {self.install.version} ({self.install.bindir / 'postgres'})"

    def _answers(self) -> str | None:
        """None once it answers; else why not yet. An answer waiting cannot change (its database is gone
        from its data folder) is a StartError at once, not after READY_TIMEOUT."""
        try:
            with self.admin(self.dbname, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return None
        except psycopg.OperationalError as exc:
            said = (str(exc).strip().splitlines() or ["?"])[0]
            final = _FOR_GOOD.search(said)
            if final is not None:
                raise StartError.with_log(self.what, f"it runs, but {final.group(1)}", self.log_text()) from None
            return said


    def admin(self, dbname: str, connect_timeout: int = 10) -> psycopg.Connection[Any]:
        """The superuser on the server's Unix socket: trust, in a folder only the server user (and
        root) may enter. Over TCP every role needs its password."""
        return psycopg.connect(host=str(self.rundir / "sock"), port=self.port, user=USER, dbname=dbname,
                               connect_timeout=connect_timeout, autocommit=True)

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()

    def exit_code(self) -> int | None:
        """Its exit code once it ended (negative: the signal that ended it), else None."""
        return self._process.exit_code() if self._process is not None else None

    def ended(self) -> str | None:
        """How it ended, or that it is stopped (ServerProcess.ended), else None."""
        return self._process.ended() if self._process is not None else None

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


def _initdb(install: PgInstall, user: ServerUser, data: Path, rundir: Path) -> None:
    argv = [
        str(install.bindir / "initdb"),
        "-D",
        str(data),
        "-U",
        USER,
        *_INITDB,
        "--no-sync",
    ]
    uid, gid, groups = user.popen_ids()
    done = subprocess.run(
        argv,
        check=False,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=rundir,
        env=_child_env(),
        user=uid,
        group=gid,
        extra_groups=groups,
        timeout=300,
        preexec_fn=die_with_parent,
    )
    if done.returncode != 0:
        raise StartError.with_log(
            f"initdb of PostgreSQL {install.version} ({install.bindir})",
            f"exit code {done.returncode}",
            done.stdout + done.stderr,
            f"It ran as user {user.name}; that user must be able to read the binaries.",
        )


def _create_objects(server: _Postmaster) -> None:
    """The database, then the roles and objects the probes use (fixtures.py)."""
    ident = sql.Identifier
    with server.admin("postgres") as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(ident(DBNAME), ident(USER)))
    with server.admin(DBNAME) as conn:
        fixtures.apply(conn)


def _build_template(install: PgInstall, user: ServerUser, data: Path, rundir: Path) -> Path:
    """initdb into `data` (its parent must exist and belong to the server user), then fixtures."""
    _initdb(install, user, data, rundir)
    server = _Postmaster(install, user, data, rundir, "postgres", "template.log")
    try:
        server.start()
        _create_objects(server)
    finally:
        server.stop()
    return data


def _runs_as(install: PgInstall, user: ServerUser) -> bool:
    """Whether `postgres --version` runs as the server user (else a start failure is the binary's)."""
    uid, gid, groups = user.popen_ids()
    try:
        done = subprocess.run([str(install.bindir / "postgres"), "--version"], stdin=subprocess.DEVNULL,
                              capture_output=True, env=_child_env(), user=uid, group=gid, extra_groups=groups,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def discard_template(template: Path) -> None:
    """Remove a cached template (under its build lock), so the next ensure_template builds it anew."""
    with file_lock(template.parent / f".{template.name.split('-')[0]}.lock"):
        if os.path.lexists(template):
            doomed = template.with_name(f".build-{template.name}-discarded")
            remove_entry(doomed)
            os.rename(template, doomed)
            remove_entry(doomed)


#: The folders of every data folder initdb makes (PostgreSQL 16-18), and its control file's size.
_DATA_FOLDERS = ("base", "global", "pg_commit_ts", "pg_logical", "pg_multixact", "pg_notify", "pg_replslot",
                 "pg_serial", "pg_snapshots", "pg_stat", "pg_subtrans", "pg_tblspc", "pg_twophase", "pg_wal",
                 "pg_xact")
PG_CONTROL_SIZE = 8192
#: template1, template0, postgres and leakcheck's own.
_DATABASES = 4


def template_problem(template: Path, version: Version) -> str | None:
    """Why the cached template at `template` cannot be used, by looking at it (nothing is started);
    None when it can. A template appears only by rename, whole: this finds one damaged since."""
    if not template.is_dir():
        return "is a file, not a folder"
    try:
        major = (template / "PG_VERSION").read_text(errors="replace").strip()
    except OSError:
        return "has no PG_VERSION"
    if major != str(version.parts[0]):
        return f"its PG_VERSION says {major[:20]!r}, not {version.parts[0]}"
    missing = next((name for name in _DATA_FOLDERS if not (template / name).is_dir()), None)
    if missing is not None:
        return f"has no {missing}/ folder"
    try:
        size = (template / "global" / "pg_control").stat().st_size
    except OSError:
        return "has no global/pg_control"
    if size != PG_CONTROL_SIZE:
        return f"its global/pg_control is {size} bytes, not {PG_CONTROL_SIZE} (cut short)"
    databases = [d for d in (template / "base").iterdir() if d.name.isdigit() and (d / "PG_VERSION").is_file()]
    if len(databases) != _DATABASES:
        return f"its base/ holds {len(databases)} databases, not {_DATABASES}"
    return None


def ensure_template(install: PgInstall, cache: Path, user: ServerUser, rundir: Path) -> Path:
    """cache/templates/<version>: an initialised data dir with our database and roles (built once; one
    found damaged is built again, saying why)."""
    root = cache / "templates"
    target = root / f"{install.version}-{_TEMPLATE_ID}"
    there = os.path.lexists(target)
    problem = template_problem(target, install.version) if there else "is missing"
    if problem is None:
        return target
    why = unwritable(root)
    if why is not None:  # a read-only cache: a template for this run only, in the run's own folder
        have = f"a damaged PostgreSQL {install.version} template ({target} {problem}: remove it)" if there else \
            f"no PostgreSQL {install.version} template"
        log.info(f"the cache has {have} and cannot take one ({why}); initialising one for this run only ...")
        return _build_template(install, user, rundir / "template", rundir)
    root.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        root.chmod(0o755)  # the server user builds inside it
    with file_lock(root / f".{install.version}.lock"):
        there = os.path.lexists(target)
        problem = template_problem(target, install.version) if there else None
        if there and problem is None:
            return target  # another process just built it
        if problem is not None:
            log.info(f"the cached PostgreSQL {install.version} template {target} {problem}; rebuilding it")
        log.info(f"initialising a PostgreSQL {install.version} template in {target} (once) ...")
        build = Path(tempfile.mkdtemp(prefix=f".build-{install.version}-", dir=root))
        try:
            user.chown(build)
            data = _build_template(install, user, build / "data", rundir)
            remove_entry(target)
            os.rename(data, target)
        finally:
            shutil.rmtree(build, ignore_errors=True)
    return target


class PgServer:
    """A context manager running one PostgreSQL on 127.0.0.1 for the whole run.

    Entering copies the cached template into a fresh temp dir and starts `postgres` there;
    leaving (always, also after a failed enter) stops it and removes the temp dir.
    """

    host = HOST

    def __init__(self, install: PgInstall, cache: Path, user: ServerUser) -> None:
        self.install, self.cache, self.user = install, cache, user
        self.port = 0
        self.tmpdir: Path | None = None
        self._server: _Postmaster | None = None
        self._last_log = ""
        self._template: Path | None = None
        self.credentials = new_credentials(USER, fixtures.APP_ROLE)

    @property
    def version(self) -> Version:
        return self.install.version

    def endpoint(self) -> Endpoint:
        """The superuser over TCP, with every role's password for this run (and the server's own socket folder,
        for the harness's own session: Endpoint.for_harness)."""
        own = str(self.tmpdir / "sock") if self.tmpdir is not None else ""
        return Endpoint(self.host, self.port, credentials=self.credentials, own_socket=own)

    def socket_endpoint(self) -> Endpoint:
        """The same server on its Unix socket, where PgBouncer connects: trust, as for `admin`, in a folder
        only the server user PgBouncer runs as (and root) may enter, so no server login of PgBouncer's
        stretches a password (its own SHA-256: ~5 ms of CPU per SCRAM login, one per probe)."""
        assert self.tmpdir is not None, "started"
        return Endpoint(str(self.tmpdir / "sock"), self.port, credentials=self.credentials)

    def down(self) -> str | None:
        """Why it no longer serves (its postmaster ended during the run, or is stopped), else None.
        Cheap (a waitpid, a read of /proc): the runner's watcher asks it while a probe runs."""
        how = self._server.ended() if self._server is not None else None
        if how is None:
            return None
        if how == STOPPED:
            return f"PostgreSQL {self.version} at {HOST}:{self.port}: {how}"
        tail = "\n".join(self.log_text().strip().splitlines()[-5:])
        return (f"PostgreSQL {self.version} at {HOST}:{self.port} is not running: {how} during the run; "
                f"its log ends:\n{tail}")

    def log_text(self) -> str:
        """The server's log so far (kept after exit)."""
        return self._server.log_text() if self._server and self.tmpdir else self._last_log

    def __enter__(self) -> Self:
        try:
            self.stage()
            self.copy()
            self.launch()
        except BaseException:
            self.__exit__()
            raise
        return self

    # The three steps of entering, apart so that a run can copy several servers' data at once
    # (NativeBackend.warm). stage() and launch() fork, so they belong to the main thread.

    def stage(self) -> None:
        """Its temp dir (marked: a later run sweeps it if we are killed), and its template."""
        self.tmpdir = fresh_name(f"leakcheck-pg{self.version}-")
        create(self.tmpdir)
        (self.tmpdir / "sock").mkdir()
        self.user.chown_tree(self.tmpdir)
        self._template = ensure_template(self.install, self.cache, self.user, self.tmpdir)

    def copy(self) -> None:
        """The template into a fresh data dir (no fork: safe in a thread)."""
        assert self.tmpdir is not None and self._template is not None
        data = self.tmpdir / "data"
        shutil.rmtree(data, ignore_errors=True)
        shutil.copytree(self._template, data, symlinks=True)
        self.user.chown_tree(data)
        data.chmod(0o700)

    def launch(self) -> None:
        """Start postgres on the copied data; a cached template that does not start is damaged:
        it is built again, once."""
        assert self._template is not None
        try:
            self._launch()
        except StartError as exc:
            template = self._template
            said = self._server.bad_setting() if self._server is not None else None
            if said is not None:  # a setting's fault, not the template's: keep the template
                raise StartError(f"PostgreSQL {self.version} refused a server setting: {said}. "
                                 f"Settings given: {' '.join(_SETTINGS)}\n{exc}") from None
            if not template.is_relative_to(self.cache) or not _runs_as(self.install, self.user):
                raise  # not the template's fault
            first = (str(exc).splitlines() or ["?"])[0]
            log.info(f"the cached PostgreSQL {self.version} template {template} did not start ({first}); "
                     "rebuilding it")
            if self._server is not None:  # one not ready may still run: it must not touch the new copy
                self._server.stop()
                self._server = None
            discard_template(template)
            assert self.tmpdir is not None
            self._template = ensure_template(self.install, self.cache, self.user, self.tmpdir)
            self.copy()
            self._launch()
        except BaseException:
            if self.tmpdir is not None:
                stop_servers_in(self.tmpdir)  # one a signal hid from us during Popen
            raise

    def _launch(self) -> None:
        assert self.tmpdir is not None
        if self._server is not None:
            self._server.stop()
            self._server = None
        data, rundir = self.tmpdir / "data", self.tmpdir

        def start() -> None:
            self._server = _Postmaster(self.install, self.user, data, rundir, DBNAME, "postgres.log")
            self._server.start()

        def stop() -> None:
            if self._server is not None:
                self._server.stop()

        try:
            start_retrying_port_clash(start, stop, attempts=2)
        except PortClash:
            assert self._server is not None
            raise StartError.with_log(
                f"PostgreSQL {self.version}", "another process took its port, twice",
                self._server.log_text(), "Run again.",
            ) from None
        assert self._server is not None
        self.port = self._server.port
        with self._server.admin(DBNAME) as conn:
            fixtures.set_passwords(conn, self.credentials)

    def __exit__(self, *exc: object) -> None:
        """Stop it, then remove its folder and the shared memory segment a postmaster that did not shut
        down cleanly (killed) left: once its backends are gone (stopped too), nothing holds it."""
        segment = recorded_segment(self.tmpdir / "data" / "postmaster.pid") if self.tmpdir is not None else None
        try:
            if self._server is not None:
                self._server.stop()
        finally:
            if self._server is not None and self.tmpdir is not None:
                self._last_log = self._server.log_text()
            if self.tmpdir is not None:
                remove_folder(self.tmpdir)
                self.tmpdir = None
            if segment is not None:
                remove_when_unused(segment)
