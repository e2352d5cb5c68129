"""DSNs of a running pooler: checked up front, never shown with their password (pure)."""

import pytest

from leakcheck.errors import UsageError
from leakcheck.provision.external import check_dsn, default_name, redacted


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
