"""What the servers of a run depend on, checked once before any server starts (each problem: one line).

The environment variables leakcheck reads, the paths given to --pg/--bouncer, the team's ini, and for
the native backend the server user and the temp folder. Misconfiguration found here is one UsageError
instead of the same failure in every test. The gate's baseline (--expect) is read by the gate
(gate/judge.py's `policy_of`), the files a run writes are checked by results/outputs.py's `check`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path

from leakcheck.config.config import Config
from leakcheck.config.output_files import check_writable
from leakcheck.model.errors import UsageError
from leakcheck.provision.containers.images import BASE_IMAGE_ENV
from leakcheck.provision.host.system import ServerUser, cache_root, server_user, unreadable_by
from leakcheck.provision.pgbouncer import team_ini
from leakcheck.provision.pgbouncer.binaries import URL_ENV, given_bouncer
from leakcheck.provision.pgbouncer.tarballs import TARBALLS_ENV, local_tarballs
from leakcheck.provision.postgres.binaries import resolve_pg
from leakcheck.provision.postgres.fixtures import refuse_older

MB = 1024 * 1024
#: Free space the temp folder needs: a copy of a PostgreSQL template (~50 MB) per version, plus logs.
MIN_TMP_FREE = 200 * MB
_URL_SCHEMES = ("http", "https", "file")


def check(config: Config, backend: str, environ: Mapping[str, str] | None = None) -> None:
    """Every check, in the order a user would fix them; the first problem raises a UsageError."""
    env = os.environ if environ is None else environ
    check_environment(env)
    check_paths(config)
    if config.bouncer_ini is not None:
        team_ini.load(config.bouncer_ini)  # as PgBouncer loads it: files the server user reads, keys a team may set
    if backend == "native":
        user = server_user()
        temp = check_temp_folder(env, MIN_TMP_FREE)
        check_server_user_reads(user, _server_paths(cache_root(), temp, config))
    else:
        check_temp_folder(env, 0)


#: The environment variables leakcheck reads (tests' LEAKCHECK_TEST_* etc. are not leakcheck's).
ENVIRONMENT = ("LEAKCHECK_CACHE", "LEAKCHECK_RUN_AS", TARBALLS_ENV, URL_ENV, BASE_IMAGE_ENV, "LEAKCHECK_TIMINGS")


def check_paths(config: Config) -> None:
    """A path given to --pg or --bouncer exists and is that program (its own --version banner)."""
    for spec in (*config.pg, *config.bouncer):
        if spec.path is not None and not os.path.exists(spec.path):
            option = "--pg" if spec in config.pg else "--bouncer"
            raise UsageError(f"{option}={spec.raw}: {spec.path} does not exist; give an existing path or a version")
    for spec in config.pg:
        if spec.path is not None:  # a path is checked, never cached
            refuse_older(resolve_pg(spec, Path("/nonexistent")).version, f"--pg={spec.raw}")
    for spec in config.bouncer:
        if spec.path is not None:
            given_bouncer(spec.path, spec.raw)


def _blank_is_unset(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "")
    return value.strip() or None


def check_environment(env: Mapping[str, str]) -> None:
    """The LEAKCHECK_* variables. Empty counts as unset; only spaces is an error (some readers would use it)."""
    for name in ENVIRONMENT:
        value = env.get(name, "")
        if value and not value.strip():
            raise UsageError(f"{name}={value!r} is only spaces: unset it, or give it a value")
    if _blank_is_unset(env, "LEAKCHECK_CACHE") is not None:
        cache_root()  # creates it when missing, or says in one line why it cannot
    server_user()  # LEAKCHECK_RUN_AS: an existing user, not root
    tarballs = _blank_is_unset(env, TARBALLS_ENV)
    if tarballs is not None:
        local_tarballs(tarballs)  # every item an existing file or folder
    url = _blank_is_unset(env, URL_ENV)
    if url is not None:
        check_url_template(url)
    timings = _blank_is_unset(env, "LEAKCHECK_TIMINGS")
    if timings is not None:  # written at exit (provision/host/timing.py): a bad path must not wait for then
        check_writable(Path(timings), "LEAKCHECK_TIMINGS", "timings.json")
    image = _blank_is_unset(env, BASE_IMAGE_ENV)
    if image is not None and any(ch.isspace() for ch in image):
        raise UsageError.bad_value(BASE_IMAGE_ENV, image, "an image name such as debian:bookworm-slim")


def check_url_template(template: str) -> None:
    """$LEAKCHECK_PGBOUNCER_URL: an http(s) or file URL with {version} in it."""
    expected = "an http(s):// or file:// URL with {version}, e.g. https://mirror/pgbouncer-{version}.tar.gz"
    if "{version}" not in template:
        raise UsageError.bad_value(URL_ENV, template, expected)
    parts = urllib.parse.urlsplit(template.replace("{version}", "1.24.1"))
    if parts.scheme not in _URL_SCHEMES or (parts.scheme != "file" and not parts.netloc) or not parts.path:
        raise UsageError.bad_value(URL_ENV, template, expected)


def free_space_problem(folder: Path, need: int) -> str | None:
    """Why `folder` lacks `need` bytes of free space, else None."""
    free = shutil.disk_usage(folder).free
    if free >= need:
        return None
    return f"{folder} has {free // MB} MB free, leakcheck needs {need // MB} MB there"


def check_temp_folder(env: Mapping[str, str], need: int) -> Path:
    """The temp folder servers use: it exists, a file can be created in it, and `need` bytes are free.

    $TMPDIR is checked as given: Python would silently fall back to /tmp, the servers would not.
    """
    given = env.get("TMPDIR")
    if given:
        folder = Path(given)
        if not folder.is_dir():
            raise UsageError(
                f"TMPDIR={given} is not an existing folder (servers keep their data there); "
                "create it, or point TMPDIR at a writable folder such as /tmp"
            )
    else:
        folder = Path(tempfile.gettempdir())
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        name = f"TMPDIR={given}" if given else f"the temp folder {folder}"
        raise UsageError(
            f"cannot create files in {name} ({exc.strerror or exc}); point TMPDIR at a writable folder"
        ) from None
    problem = free_space_problem(folder, need)
    if problem is not None:
        raise UsageError(f"the temp folder is too full: {problem}; free space, or point TMPDIR at another disk")
    return folder


def _server_paths(cache: Path, temp: Path, config: Config) -> list[tuple[Path, str]]:
    """What the server user must read or enter, each with what to do when it cannot."""
    fix_cache = (f"let every user read and enter {cache} and the folders above it (chmod o+rX), "
                 "or set LEAKCHECK_CACHE to such a folder")
    paths = [(cache, fix_cache), (temp, "point TMPDIR at a folder every user can enter, such as /tmp")]
    for kind, program in (("postgres", "bin/postgres"), ("pgbouncer", "bin/pgbouncer")):
        store = cache / kind
        if store.is_dir():
            paths.append((store, fix_cache))
            for version in sorted(store.iterdir()):
                if not version.name.startswith("."):
                    paths.append((version, fix_cache))
                    if (version / program).exists():
                        paths.append((version / program, fix_cache))
    for spec in (*config.pg, *config.bouncer):
        if spec.path is not None:
            paths.append((spec.path, "move it where that user can read it (not under /root)"))
    return paths


def check_server_user_reads(user: ServerUser, paths: Iterable[tuple[Path, str]]) -> None:
    """As root, the server user can read and enter (or run) each path; checked by that very user."""
    wanted = list(paths)
    failed = unreadable_by(user, [str(p) for p, _ in wanted])
    if not failed:
        return
    fixes = {str(p): fix for p, fix in wanted}
    first = failed[0]
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    above = [str(p) for p in reversed(Path(first).parents)]
    blocked = unreadable_by(user, above, execute=True)
    where = f" ({blocked[0]} blocks it: that user cannot enter it)" if blocked else ""
    raise UsageError(
        f"the server user {user.name} (postgres and pgbouncer run as it because leakcheck runs as root) "
        f"cannot read {first}{more}{where}: {fixes.get(first, 'make it readable')}, or set LEAKCHECK_RUN_AS"
    )
