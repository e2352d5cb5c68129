"""The harness runs its own statements through asyncpg's uncached path (drivers/clients.py `_fetch_unnamed`), which
is asyncpg's private API: an asyncpg that renamed or dropped a part of it fails here, before any server starts,
rather than as errors in every asyncpg cell."""

from __future__ import annotations

import inspect

import asyncpg
from asyncpg.protocol import protocol


def test_asyncpg_still_has_the_uncached_statement_path_the_harness_uses() -> None:
    statement = inspect.signature(asyncpg.connection.Connection._get_statement).parameters
    assert "use_cache" in statement and "named" in statement
    for part in ("_check_open", "_stmt_exclusive_section"):
        assert hasattr(asyncpg.connection.Connection, part) or part in inspect.getsource(asyncpg.connection.Connection)
    assert hasattr(protocol.BaseProtocol, "bind_execute") and hasattr(protocol.BaseProtocol, "_get_timeout")
