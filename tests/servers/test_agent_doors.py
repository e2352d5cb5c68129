"""A team's agent (`--drivers=cmd:PATH`) is a client like any other: it reaches PostgreSQL over TCP with a
role's password, and never as the user that runs the servers, whose Unix socket trusts the superuser and
whose data folder holds pg_hba.conf."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakcheck.drivers.agents import team
from leakcheck.provision.base import DBNAME, USER
from leakcheck.provision.postgres.server import PgServer
from tests.support.agents import agent_folder, hello, write_agent

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root runs a team agent (as its own user)")

#: After its hello, the agent knocks on each door and writes what it met to doors.json beside it: the server's
#: Unix socket (a startup packet as the superuser: "in" when trust let it in), its data folder, and its TCP port
#: (which must answer with a password request).
KNOCK = """
import socket, struct
def startup(family, where):
    with socket.socket(family) as s:
        s.settimeout(5)
        s.connect(where)
        body = b'user\\0' + USER.encode() + b'\\0database\\0' + DB.encode() + b'\\0\\0'
        s.sendall(struct.pack('!ii', len(body) + 8, 196608) + body)
        reply = s.recv(9)
        if reply[:1] != b'R':
            return repr(reply)
        return {0: 'in', 10: 'password asked'}.get(struct.unpack('!i', reply[5:9])[0], repr(reply))
met = {}
for door, knock in (('socket', lambda: startup(socket.AF_UNIX, SOCKET)), ('data', lambda: str(os.listdir(DATA))),
                    ('tcp', lambda: startup(socket.AF_INET, ('127.0.0.1', PORT)))):
    try:
        met[door] = knock()
    except OSError as exc:
        met[door] = exc.strerror
json.dump(met, open(os.path.join(HERE, 'doors.json'), 'w'))
"""


@pytest.fixture
def folder() -> Iterator[Path]:
    yield from agent_folder()


def test_a_team_agent_cannot_log_in_on_the_servers_socket_nor_read_its_data_but_reaches_it_over_tcp(
    folder: Path, postgres: PgServer
) -> None:
    assert postgres.tmpdir is not None
    where = (f"USER, DB, PORT = {USER!r}, {DBNAME!r}, {postgres.port}\n"
             f"SOCKET = {str(postgres.tmpdir / 'sock' / f'.s.PGSQL.{postgres.port}')!r}\n"
             f"DATA = {str(postgres.tmpdir / 'data')!r}\n")
    path = write_agent(folder, hello(driver="knocker", then=where + KNOCK), "knocker")
    team.team_driver(f"cmd:{path}")
    met = json.loads((folder / "doors.json").read_text())
    assert met == {"socket": "Permission denied", "data": "Permission denied", "tcp": "password asked"}


def test_a_team_agent_is_never_given_the_superusers_password(folder: Path, pytester: pytest.Pytester) -> None:
    # session_authorization logs in as the run's superuser: a team's agent would hold its password, and with it
    # COPY ... TO PROGRAM as the server user. Its cell is not applicable, and the agent is never asked to connect.
    path = write_agent(folder, hello(driver="nosuper"), "nosuper")  # answers hello, then nothing
    result = pytester.runpytest_inprocess("--pg=16", "--bouncer=1.24", f"--drivers=cmd:{path}", "--controls=no",
                                          "--probes=session_authorization", "--results=r.json")
    result.assert_outcomes(skipped=1)
    [outcome] = json.loads((pytester.path / "r.json").read_text())["outcomes"]
    assert outcome["verdict"] == "not_applicable" and "never given its password" in outcome["evidence"]
