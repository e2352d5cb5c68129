"""A TMPDIR with a space in its path: PgBouncer reaches PostgreSQL on a socket folder under it, and a fleet's
processes reach each other and are reached there, so every connection string must keep that path whole
(pgbouncer.ini's [databases] and [peers], leakcheck's own libpq strings). Real servers, as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.servers import enterable_folder

pytestmark = pytest.mark.servers

#: asyncpg: cancel_routed sends the cancel key its login was given, which psycopg does not show.
CELLS = [
    ["--bouncer=1.24", "--drivers=psycopg", "--probes=timezone,cancel_late"],
    ["--bouncer=1.24", "--bouncer-fleet=2", "--bouncer-set", "peering=yes", "--drivers=asyncpg",
     "--probes=cancel_routed,cancel_late"],
]


@pytest.mark.parametrize("cell", CELLS, ids=["pgbouncer", "fleet"])
def test_a_run_under_a_tmpdir_with_a_space_measures_every_cell(cell: list[str]) -> None:
    with enterable_folder() as parent, enterable_folder() as empty:
        tmp = parent / "a folder with spaces"
        tmp.mkdir()
        tmp.chmod(0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")} | {"TMPDIR": str(tmp)}
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--rootdir={empty}", str(empty),
             "--pg=16", *cell],
            cwd=empty, env=env, capture_output=True, text=True, timeout=180, check=False)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0 and " passed" in last and "error" not in last and "failed" not in last, (
        done.stdout[-3000:] + done.stderr[-2000:])
