"""When a cancel probe stops waiting for a cancel that has not stopped the statement (probes/cancel.py):
at CANCEL_BOUND, or sooner only on evidence, which is the driver's call having returned after its peer
closed the cancel connection *and* the route's word that no cancel request is in flight. Pure: asyncio
tasks stand in for the statement and the driver's call."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest

from leakcheck.probes import cancel
from leakcheck.probes.base import Attempt

BOUND = 0.3


@dataclass
class Route:
    """A scenario as the wait sees it: only its word on cancels in flight (counting the times it was asked)."""

    word: str | None = "the route counted none"
    asked: int = 0
    #: seconds the route takes to answer (a console that answers slowly)
    delay: float = 0.0

    async def settled(self) -> str | None:
        self.asked += 1
        await asyncio.sleep(self.delay)
        return self.word

    def scenario(self, tells: bool = True) -> object:
        return type("S", (), {"cancels_settled": self.settled if tells else None})()


async def _wait(route: Route, call: Callable[[], Awaitable[Attempt]], statement_ends_after: float | None = None,
                tells: bool = True) -> tuple[float | None, str | None, float]:
    loop = asyncio.get_running_loop()

    async def statement() -> Attempt:
        await asyncio.sleep(60 if statement_ends_after is None else statement_ends_after)
        return Attempt(value=1)

    task, cancelling = asyncio.create_task(statement()), asyncio.create_task(call())
    began = loop.time()
    try:
        await asyncio.sleep(0)
        acted, settled = await cancel._until_ended_or_settled(route.scenario(tells), task, cancelling, began)  # type: ignore[arg-type]
        return acted, settled, loop.time() - began
    finally:
        task.cancel()
        cancelling.cancel()


async def closed() -> Attempt:
    return Attempt(value=True)


async def not_closed() -> Attempt:
    return Attempt(value=False)


@pytest.fixture(autouse=True)
def _short_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cancel, "CANCEL_BOUND", BOUND)


def test_a_cancel_whose_peer_closed_ends_the_wait_on_the_routes_word_long_before_the_bound() -> None:
    route = Route()
    acted, settled, took = asyncio.run(_wait(route, closed))
    assert acted is None and settled is not None and "the route counted none" in settled
    assert took < BOUND / 2 and route.asked == 1


def test_a_cancel_that_returned_without_seeing_its_peer_close_never_asks_the_route_and_waits_the_bound() -> None:
    route = Route()
    acted, settled, took = asyncio.run(_wait(route, not_closed))
    assert (acted, settled, route.asked) == (None, None, 0)
    assert took >= BOUND


def test_a_route_that_still_counts_a_cancel_in_flight_is_asked_again_until_the_bound() -> None:
    route = Route(word=None)
    acted, settled, took = asyncio.run(_wait(route, closed))
    assert (acted, settled) == (None, None) and took >= BOUND and route.asked > 1


def test_a_route_that_cannot_tell_leaves_the_wait_to_the_bound() -> None:
    route = Route()
    acted, settled, took = asyncio.run(_wait(route, closed, tells=False))
    assert (acted, settled, route.asked) == (None, None, 0) and took >= BOUND


def test_a_driver_call_still_running_is_not_evidence() -> None:
    async def slow() -> Attempt:
        await asyncio.sleep(60)
        return Attempt(value=True)

    route = Route()
    acted, settled, took = asyncio.run(_wait(route, slow))
    assert (acted, settled, route.asked) == (None, None, 0) and took >= BOUND


def test_a_statement_that_ends_before_the_wait_does_is_timed_as_acted_and_the_route_is_not_needed() -> None:
    route = Route(word=None)
    acted, settled, _ = asyncio.run(_wait(route, not_closed, statement_ends_after=0.05))
    assert acted is not None and 0.04 <= acted < BOUND and settled is None


def test_a_statement_that_ends_while_the_route_is_asked_is_timed_as_acted() -> None:
    acted, settled, _ = asyncio.run(_wait(Route(delay=0.2), closed, statement_ends_after=0.1))
    assert acted is not None and acted < 0.2 and settled is None


def test_a_route_that_answers_only_after_the_bound_leaves_the_wait_at_the_bound() -> None:
    acted, settled, took = asyncio.run(_wait(Route(delay=60), closed))
    assert (acted, settled) == (None, None) and BOUND <= took < BOUND + 0.5


class _Statement:
    """A's statement waiting for C's advisory lock, and C: C's unlock lets it complete normally. A's cancel
    call returns True (its peer closed the cancel connection) and stops nothing: a cancel lost, or still on
    its way."""

    def __init__(self) -> None:
        self.released = asyncio.Event()

    async def query(self, sql: str) -> list[tuple[int]]:
        if "pg_advisory_xact_lock" in sql:
            await self.released.wait()
        if "pg_advisory_unlock" in sql:
            self.released.set()
        return [(1,)]

    async def cancel(self) -> bool:
        return True


class _Scenario:
    """cancel_own's scenario as the pure tier can give it: A and C on one `_Statement`, a witness that still
    sees the statement waiting, and the route's word on cancels in flight (None: it cannot tell)."""

    token = "t"

    def __init__(self, route: Route | None) -> None:
        self.a = self.b = self.statement = _Statement()
        self.cancels_settled = route.settled if route is not None else None
        self.witness = type("W", (), {"running": lambda _self, marker: "still waiting"})()

    def name(self, stem: str) -> str:
        return f"lc_{stem}_{self.token}"

    async def c(self) -> _Statement:
        return self.statement

    async def observe(self, *args: object) -> None:
        return None

    async def running(self, *args: object) -> None:
        return None


def test_a_cancel_the_route_cannot_settle_is_an_error_at_the_bound_never_lost() -> None:
    # Odyssey, pgpool-II, a fleet, a running pooler: a cancel slower than the bound looks like a lost one
    with pytest.raises(cancel.ProbeError) as raised:
        asyncio.run(cancel._cancel_own(_Scenario(None)))  # type: ignore[arg-type]
    said = str(raised.value)
    assert "had not ended within" in said and "completed normally once C let go" in said
    assert "the witness still saw it waiting on C's lock then" in said and "so no verdict" in said


def test_a_cancel_the_route_settled_while_the_statement_still_waited_is_lost() -> None:
    seen = asyncio.run(cancel._cancel_own(_Scenario(Route())))  # type: ignore[arg-type]
    assert seen.lost and "had not ended when A's driver had seen its peer close" in seen.evidence
