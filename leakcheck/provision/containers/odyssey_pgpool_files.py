"""Odyssey's and pgpool-II's side of the containers backend (pure): their files, commands, build args.

The images come from docker/odyssey and docker/pgpool (Debian's packages; see docker/README.md).
Inside a container the pooler listens on 0.0.0.0:6432 (the backend publishes it on 127.0.0.1) and
reaches PostgreSQL as `postgres:5432` on the run's network; its files are copied to /leakcheck,
rendered by the same functions as for the native backend.
"""

from __future__ import annotations

from leakcheck.model.errors import UsageError
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import PoolerKind
from leakcheck.model.versions import Spec, Version
from leakcheck.provision.base import DBNAME, USER
from leakcheck.provision.containers.images import CONFIG_DIR, PG_ALIAS, PG_PORT
from leakcheck.provision.odyssey.conf import OdysseyLayout, render_odyssey_conf
from leakcheck.provision.pgpool.conf import PgpoolLayout, render_files

Settings = tuple[tuple[str, str], ...]
Credentials = tuple[tuple[str, str], ...]

POOLER_PORT = 6432
#: pgpool-II's sockets, pid file and status file: the image's user may write there (/leakcheck may be read-only).
PGPOOL_RUN_DIR = "/tmp"

ODYSSEY_ENTRYPOINT = ("odyssey",)
ODYSSEY_COMMAND = (f"{CONFIG_DIR}/odyssey.conf",)
PGPOOL_ENTRYPOINT = ("pgpool",)
PGPOOL_COMMAND = (
    "-n", "-f", f"{CONFIG_DIR}/pgpool.conf", "-F", f"{CONFIG_DIR}/pcp.conf", "-a", f"{CONFIG_DIR}/pool_hba.conf",
)
def missing_image(kind: PoolerKind, spec: Spec) -> UsageError:
    """The one-line error for a pooler asked of the containers backend without its image template."""
    option = kind.record.image_option
    if not option:
        return UsageError(f"--pooler={kind.value}:{spec.raw}: the containers backend cannot start {kind.product} "
                          "(no image option names its image); run it with --backend=native")
    return UsageError(
        f"--pooler={kind.value}:{spec.raw} on the containers backend needs an image: give {option} (e.g. "
        f"{option}='leakcheck-local/{kind.value}:{{version}}', built from docker/{kind.value}: see docker/README.md)"
    )


def pgpool_reset_script(children: int, parent: int = 1) -> str:
    """A POSIX sh script doing pgpool_process's reset where pgpool-II's main process is `parent` (PID 1
    in a container): once `children` connection children are idle (process title `pgpool: wait for
    connection request`), SIGKILL them, then wait until as many new ones are idle. Exit 0 when done, 1
    after 5 s. It needs only sh, cat, tr, grep and sleep (coreutils' fractional sleep)."""
    return (
        f"n={int(children)}; parent={int(parent)}; "
        'idle() { for d in /proc/[0-9]*; do s=$(cat "$d/stat" 2>/dev/null) || continue; set -- ${s##*) }; '
        '[ "$2" = "$parent" ] || continue; tr "\\0" "\\n" 2>/dev/null < "$d/cmdline" '
        '| grep -q "^pgpool: wait for connection request *$" && echo "${d#/proc/}"; done; }; '
        "count() { c=0; for p in $1; do case \" $2 \" in *\" $p \"*) ;; *) c=$((c+1)) ;; esac; done; echo $c; }; "
        'i=0; until [ "$(count "$(idle)" "")" -ge "$n" ]; do i=$((i+1)); [ $i -gt 500 ] && exit 1; sleep 0.01; done; '
        'old=$(idle); kill -KILL $old; '
        'i=0; until [ "$(count "$(idle)" "$old")" -ge "$n" ]; do i=$((i+1)); [ $i -gt 500 ] && exit 1; sleep 0.01; done'
    )


def pgpool_reset_command(children: int) -> tuple[str, ...]:
    """`docker exec` this (as the image's user) to reset a pgpool-II container of `children` connection
    children (num_init_children: the pool size)."""
    return ("sh", "-c", pgpool_reset_script(children, 1))

def odyssey_files(settings: PoolSettings, extra: Settings, credentials: Credentials) -> dict[str, bytes]:
    """odyssey.conf for a container: listens on 0.0.0.0:6432, its storage is postgres:5432."""
    layout = OdysseyLayout(
        listen_port=POOLER_PORT, server_host=PG_ALIAS, server_port=PG_PORT, dbname=DBNAME, admin=USER,
        credentials=credentials, listen_host="0.0.0.0",
    )
    return {f"{CONFIG_DIR}/odyssey.conf": render_odyssey_conf(settings, extra, layout).encode()}


def pgpool_files(
    version: Version, settings: PoolSettings, extra: Settings, credentials: Credentials
) -> dict[str, bytes]:
    """pgpool.conf (for that pgpool-II version), pool_passwd, pool_hba.conf and pcp.conf for a container."""
    layout = PgpoolLayout(
        version=version, port=POOLER_PORT, run_dir=PGPOOL_RUN_DIR, pool_passwd=f"{CONFIG_DIR}/pool_passwd",
        server_host=PG_ALIAS, server_port=PG_PORT, listen_addresses="0.0.0.0", clients="0.0.0.0/0",
    )
    admin = (USER, dict(credentials).get(USER, ""))
    files = render_files(settings, extra, layout, credentials, admin)
    return {f"{CONFIG_DIR}/{name}": text.encode() for name, text in files.items()}
