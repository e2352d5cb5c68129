"""DSNs of a running pooler: checked up front, never shown with their password (pure)."""

import pytest

from leakcheck.model.errors import UsageError
from leakcheck.provision.running_pooler import check_dsn, default_name, redacted


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
