"""An endpoint's libpq connection string keeps each value whole (a Unix socket folder under a TMPDIR with a
space, a password with a quote): read back by psycopg's own parser, no server."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from leakcheck.provision.base import Endpoint


@pytest.mark.parametrize("host", ["127.0.0.1", "/tmp/a b/leakcheck-pg16-x/sock", "/tmp/it's", "/tmp/back\\slash"])
def test_every_value_of_the_connection_string_reads_back_as_it_was_given(host: str) -> None:
    endpoint = Endpoint(host, 5432, user="leakcheck_app", credentials=(("leakcheck_app", "p w'd\\"),))
    assert conninfo_to_dict(endpoint.conninfo("other db")) == {
        "host": host, "port": "5432", "user": "leakcheck_app", "dbname": "other db", "password": "p w'd\\"}
