"""PgBouncer's console word that it keeps server connections for a client while the waiting client itself waits
(admin.kept): in both reads, the same link, that client waiting in a full pool, and no timer of its own within the
bound."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from leakcheck.provision.pgbouncer import admin
from leakcheck.provision.pgbouncer.admin import HoldLook, HoldSettings, Read, kept

ACTIVE = [{"database": "leakcheck", "state": "active", "remote_pid": "42", "link": "0x1"}]
WAITING = [{"database": "leakcheck", "user": "app", "state": "active", "link": "0x2", "addr": "127.0.0.1",
            "port": "50002"},
           {"database": "leakcheck", "user": "app", "state": "waiting", "link": "", "addr": "127.0.0.1",
            "port": "50001"}]
#: the client whose call waits: its connection to the pooler's end (SHOW CLIENTS' addr and port)
ME = {("127.0.0.1", 50001)}
IDLE_CLIENTS = [{"database": "leakcheck", "user": "app", "state": "active", "link": "0x2"}]
#: SHOW POOLS: the app's pool holds one server connection (PgBouncer 1.18+ columns)
POOLS = [{"database": "leakcheck", "user": "app", "cl_active": "1", "cl_waiting": "1", "sv_active": "1",
          "sv_active_cancel": "0", "sv_being_canceled": "0", "sv_idle": "0", "sv_used": "0", "sv_tested": "0",
          "sv_login": "0"}]
DEFAULTS = {"query_timeout": "0", "query_wait_timeout": "120", "reserve_pool_timeout": "5",
            "idle_transaction_timeout": "0"}


def _look(*reads: tuple[list[dict[str, str]], list[dict[str, str]]], config: dict[str, str] | None = None,
          reserve: tuple[int, ...] = (0, 0), pool_size: int = 1, pools: list[dict[str, str]] = POOLS) -> HoldLook:
    both: tuple[Read, ...] = tuple((servers, clients, pools) for servers, clients in reads)
    return HoldLook(HoldSettings(DEFAULTS | (config or {}), reserve, pool_size), both)


def test_a_server_kept_for_a_client_in_both_reads_while_another_waits_is_kept() -> None:
    got = kept(_look((ACTIVE, WAITING), (ACTIVE, WAITING)), {42}, 5.0, ME)
    assert got is not None and "pid 42" in got


def test_a_server_released_by_the_second_read_is_not_kept() -> None:
    released = [{"database": "leakcheck", "state": "idle", "remote_pid": "42", "link": ""}]
    assert kept(_look((ACTIVE, WAITING), (released, WAITING)), {42}, 5.0, ME) is None


def test_a_server_linked_to_another_client_in_the_second_read_is_not_kept() -> None:
    moved = [dict(ACTIVE[0], link="0x3")]
    assert kept(_look((ACTIVE, WAITING), (moved, WAITING)), {42}, 5.0, ME) is None


def test_no_client_waiting_is_no_kept_pool() -> None:
    assert kept(_look((ACTIVE, IDLE_CLIENTS), (ACTIVE, IDLE_CLIENTS)), {42}, 5.0, ME) is None


def test_one_of_the_servers_not_shown_is_not_kept() -> None:
    assert kept(_look((ACTIVE, WAITING), (ACTIVE, WAITING)), {42, 43}, 5.0, ME) is None


def test_a_timer_of_pgbouncers_within_the_bound_leaves_the_bound_to_decide() -> None:
    for key in ("query_timeout", "query_wait_timeout", "idle_transaction_timeout", "client_idle_timeout"):
        assert kept(_look((ACTIVE, WAITING), (ACTIVE, WAITING), config={key: "3"}), {42}, 5.0, ME) is None, key
    assert kept(_look((ACTIVE, WAITING), (ACTIVE, WAITING), config={"query_wait_timeout": "6"}), {42}, 5.0, ME)


def test_the_reserve_pools_timer_counts_only_with_a_reserve_pool() -> None:
    assert kept(_look((ACTIVE, WAITING), (ACTIVE, WAITING), reserve=(0, 0)), {42}, 5.0, ME) is not None
    assert kept(_look((ACTIVE, WAITING), (ACTIVE, WAITING), reserve=(1, 0)), {42}, 5.0, ME) is None


def test_a_client_waiting_while_its_pool_has_a_free_slot_is_not_kept_from_one() -> None:
    # a pool of two holding one server connection opens another for the waiting client
    assert kept(_look((ACTIVE, WAITING), (ACTIVE, WAITING), pool_size=2), {42}, 5.0, ME) is None
    logging_in = [dict(POOLS[0], sv_login="1")]  # the second is being opened: the pool is full, counted as PgBouncer
    assert kept(_look((ACTIVE, WAITING), (ACTIVE, WAITING), pool_size=2, pools=logging_in), {42}, 5.0, ME) is not None


def test_a_client_waiting_in_another_users_pool_that_is_not_full_is_not_kept() -> None:
    other = [dict(WAITING[0]), dict(WAITING[1], user="other")]
    pools = [*POOLS, dict(POOLS[0], user="other", sv_active="0", cl_waiting="1")]
    assert kept(_look((ACTIVE, other), (ACTIVE, other), pools=pools), {42}, 5.0, ME) is None


def test_a_pool_whose_size_was_not_shown_is_never_full() -> None:
    assert kept(_look((ACTIVE, WAITING), (ACTIVE, WAITING), pool_size=0), {42}, 5.0, ME) is None


def test_a_pool_kept_while_another_client_waits_is_not_kept_from_the_client_whose_call_waits() -> None:
    # the call may wait on something else (its driver, a lock): only its own client waiting in the pool is the stall
    assert kept(_look((ACTIVE, WAITING), (ACTIVE, WAITING)), {42}, 5.0, {("127.0.0.1", 50002)}) is None
    assert kept(_look((ACTIVE, WAITING), (ACTIVE, WAITING)), {42}, 5.0, set()) is None


def test_the_client_whose_call_waits_must_wait_in_both_reads() -> None:
    served = [dict(WAITING[0]), dict(WAITING[1], state="active", link="0x3")]
    assert kept(_look((ACTIVE, WAITING), (ACTIVE, served)), {42}, 5.0, ME) is None


def test_a_pooler_that_hands_clients_timeouts_to_its_server_connections_is_never_kept_before_the_bound() -> None:
    # a client's own idle_in_transaction_session_timeout (its startup packet's) reaches the server it is linked to
    forwards = {"track_extra_parameters": "IntervalStyle, idle_in_transaction_session_timeout"}
    assert kept(_look((ACTIVE, WAITING), (ACTIVE, WAITING), config=forwards), {42}, 5.0, ME) is None
    plain = {"track_extra_parameters": "IntervalStyle, search_path", "server_reset_query": "DISCARD ALL"}
    assert kept(_look((ACTIVE, WAITING), (ACTIVE, WAITING), config=plain), {42}, 5.0, ME) is not None


def test_a_waiting_clients_connection_to_another_host_on_the_poolers_port_is_not_its_connection_to_the_pooler(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a team's agent may hold a connection to another server that listens on the same port number
    def no_console(endpoint: object) -> None:
        raise AssertionError("the console was asked about a client that has no connection to this PgBouncer")

    monkeypatch.setattr(admin, "connect", no_console)
    watch = admin.KeptWatch(SimpleNamespace(host="127.0.0.1", port=6432))  # type: ignore[arg-type]
    assert watch({1234}, 10.0, {("127.0.0.1", 50000, "127.0.0.2", 6432)}) is None
