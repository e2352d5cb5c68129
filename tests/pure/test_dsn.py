"""DSNs of a running pooler: checked up front, never shown with their secrets, their connect_timeout
kept (pure)."""

import asyncio
import re
import socket
import time
from collections.abc import Iterator

import psycopg
import pytest

from leakcheck.cli.main import main
from leakcheck.config.config import Config
from leakcheck.drivers.clients import connect
from leakcheck.model.errors import ProvisionError, UsageError
from leakcheck.model.redact import SECRET_KEYS, redacted
from leakcheck.model.target import Driver
from leakcheck.provision.base import Endpoint
from leakcheck.provision.dsn_backend import (
    RunningPoolerBackend,
    check_dsn,
    connect_timeout,
    default_name,
    without_connect_timeout,
)


def test_a_postgresql_uri_is_taken_as_given() -> None:
    assert check_dsn(" postgresql://app:pw@pooler:6432/db ", "--pooled-dsn") == "postgresql://app:pw@pooler:6432/db"


@pytest.mark.parametrize("dsn", ["host=pooler port=6432", "http://pooler/db", "postgresql:///db"])
def test_anything_else_is_one_line(dsn: str) -> None:
    with pytest.raises(UsageError, match="is not a postgresql:// URI"):
        check_dsn(dsn, "--pooled-dsn")


def test_a_password_is_never_shown() -> None:
    assert redacted("postgresql://app:s3cret@pooler:6432/db") == "postgresql://app:***@pooler:6432/db"
    assert redacted("postgresql://app@pooler/db") == "postgresql://app@pooler/db"


def test_a_running_pooler_is_named_after_its_host_and_port() -> None:
    assert default_name("postgresql://app:pw@pgbouncer.staging:6432/db") == "pgbouncer_staging_6432"


@pytest.mark.parametrize("dsn", ["postgresql://u:secret@[::1", "postgresql://u:secret@host:abc/db"])
def test_a_uri_python_cannot_read_is_a_one_line_error_without_its_password(dsn: str) -> None:
    with pytest.raises(UsageError, match="is not a valid URI") as raised:
        check_dsn(dsn, "--pooled-dsn")
    assert "secret" not in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("dsn", ["postgresql://u@h/db?sslmode=require&password=secret",
                                 "host=h password=secret user=u", "host=h password='se cret' user=u"])
def test_a_password_in_the_query_or_as_a_keyword_is_redacted_too(dsn: str) -> None:
    assert "secret" not in redacted(dsn) and "password=***" in redacted(dsn)


SECRET = "hunter2"
#: A secret libpq reads, written every way libpq (or asyncpg) reads it.
SECRET_FORMS = [
    f"postgresql://u@h/db?sslpassword={SECRET}", f"postgresql://u@h/db?SSLPassword={SECRET}&sslmode=require",
    f"postgresql://u@h/db?ssl%70assword={SECRET}", f"postgresql://u@h/db?oauth_client_secret={SECRET}",
    f"postgresql://u@h/db?sslmode=require&password={SECRET}", f"postgresql://u:{SECRET}@h1:1,h2:2/db",
    f"POSTGRESQL://u:{SECRET}@h/db", "postgresql://u:hun?ter2@h/db", "postgresql://u:hun/ter2@h/db",
    "postgresql://u:hun@ter2@h/db", f"host=h sslpassword = {SECRET} user=u", "host=h SSLPASSWORD='hun ter2' user=u",
    "host=h password='a\\'hunter2' user=u", "host=h password=a\\ hunter2 user=u", f"PGPASSWORD={SECRET} leakcheck",
]


@pytest.mark.parametrize("dsn", SECRET_FORMS)
def test_every_secret_libpq_reads_is_masked_however_its_key_is_written(dsn: str) -> None:
    shown = redacted(f"could not connect through {dsn} (refused)")
    assert "ter2" not in shown and "***" in shown and shown.endswith(" (refused)")


def test_the_secrets_masked_are_every_parameter_libpq_itself_hides() -> None:
    hidden = {o.keyword.decode() for o in psycopg.pq.Conninfo.get_defaults() if o.dispchar == b"*"}
    assert hidden and hidden <= SECRET_KEYS


@pytest.mark.parametrize("text", ["postgresql://u@h:5432/db?sslkey=/k&passfile=/p&user=a@b",
                                  "host=h sslkey=/k password_encryption=scram-sha-256 user=u"])
def test_what_is_not_a_secret_is_shown_as_it_is(text: str) -> None:
    assert redacted(text) == text


def test_a_piece_of_a_dsn_that_libpq_quotes_is_masked_given_the_dsn() -> None:
    dsn = "postgresql://u:hun%zzter2@h/db"
    assert redacted('invalid percent-encoded token: "hun%zzter2"', dsn) == 'invalid percent-encoded token: "***"'


def test_no_error_leakcheck_raises_holds_a_secret() -> None:
    assert str(ProvisionError(f"it failed at postgresql://u@h/db?sslpassword={SECRET}")).endswith("sslpassword=***")
    with pytest.raises(UsageError) as raised:  # a NUL in a DSN: the value is quoted back
        Config.from_strings({"leakcheck_pooled_dsn": f"postgresql://u:{SECRET}@h/db\x00"})
    assert SECRET not in str(raised.value)


@pytest.mark.parametrize("dsn", [f"postgresql://u@127.0.0.1:1/db?sslpassword={SECRET}",
                                 f"postgresql://u@127.0.0.1:1/db?SSLPassword={SECRET}",
                                 "postgresql://u:hun?ter2@127.0.0.1:1/db", "postgresql://u:hun%zzter2@127.0.0.1:1/db",
                                 f"postgresql://u:{SECRET}@127.0.0.1:1/db?connect_timeout=0"])
def test_a_pooled_dsn_with_a_secret_is_never_printed_in_clear(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", f"--pooled-dsn={dsn}", "--direct-dsn=postgresql://u@127.0.0.1:1/db", "--drivers=psycopg",
                 "--probes=timezone", "--controls=no"]) == 4
    captured = capsys.readouterr()
    assert "ter2" not in captured.out + captured.err and "error" in captured.err


def test_a_pooled_dsn_without_a_direct_dsn_is_refused_before_any_server_starts(
        capsys: pytest.CaptureFixture[str]) -> None:
    # without leakcheck's own session on the server, a client's pg_backend_pid() would prove the sharing
    assert main(["run", f"--pooled-dsn=postgresql://u:{SECRET}@127.0.0.1:1/db", "--drivers=psycopg",
                 "--probes=timezone"]) == 4
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "--pooled-dsn without --direct-dsn" in lines[0], lines
    assert "give --direct-dsn=" in lines[0] and SECRET not in captured.err and captured.out == ""


@pytest.mark.parametrize("value", ["0", "-1", "abc", "2.5"])
def test_a_connect_timeout_that_does_not_bound_the_wait_is_refused(value: str) -> None:
    with pytest.raises(UsageError, match=f"connect_timeout='{re.escape(value)}' in .* is not valid"):
        check_dsn(f"postgresql://u@h/db?connect_timeout={value}", "--pooled-dsn")


def test_asyncpg_gets_the_uri_without_connect_timeout_as_its_own_timeout() -> None:
    assert without_connect_timeout("postgresql://u@h/db?connect_timeout=3&sslmode=require") == \
        "postgresql://u@h/db?sslmode=require"
    assert without_connect_timeout("postgresql://u@h/db?connect_timeout=3") == "postgresql://u@h/db"
    assert connect_timeout("postgresql://u@h/db?connect_timeout=3") == 3
    assert connect_timeout("postgresql://u@h/db") == 10


@pytest.fixture
def silent() -> Iterator[int]:
    """A port on 127.0.0.1 that takes connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def _through(port: int, how: str) -> None:
    dsn = f"postgresql://u@127.0.0.1:{port}/db?connect_timeout=2&sslmode=disable"
    if how == "server_version":
        RunningPoolerBackend(dsn).server_version()
    else:
        asyncio.run(connect(Driver(how), "A", Endpoint("", 0, dsn=dsn)))


@pytest.mark.parametrize("how", ["server_version", "psycopg", "asyncpg"])
def test_a_connect_timeout_in_the_dsn_is_the_one_leakcheck_waits(how: str, silent: int) -> None:
    started = time.monotonic()
    with pytest.raises((TimeoutError, psycopg.OperationalError, ProvisionError)):  # each one's timeout
        _through(silent, how)
    assert time.monotonic() - started < 7  # the DSN's 2 s, not leakcheck's 10
