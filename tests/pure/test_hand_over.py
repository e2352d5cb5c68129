"""Scenario.hand_over: when A leaves and where B comes from, per route (pure, fake clients)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from leakcheck.model.errors import ProbeError
from leakcheck.model.target import Route
from leakcheck.probes.base import NotYet
from leakcheck.probes.scenario import Scenario


@dataclass
class Fake:
    label: str
    log: list[str] = field(default_factory=list)

    async def close(self) -> None:
        self.log.append(f"{self.label} closed")

    def alias(self, label: str) -> Fake:
        return Fake(label, self.log)


def handed(route: Route) -> tuple[Scenario, list[str]]:
    log: list[str] = []
    a = Fake("A", log)

    async def next_b() -> Any:
        log.append("B connected")
        return Fake("B", log)

    s = Scenario(a=cast(Any, a), b=NotYet(), route=route, next_b=next_b)
    asyncio.run(s.hand_over())
    return s, log


@pytest.mark.parametrize("route", [Route.TRANSACTION, Route.DIRECT])
def test_b_connects_only_after_a_has_left(route: Route) -> None:
    s, log = handed(route)
    assert log == ["A closed", "B connected"] and s.b.label == "B"


def test_on_the_session_route_a_stays_connected_while_b_connects() -> None:
    _, log = handed(Route.SESSION)
    assert log == ["B connected"]


def test_on_the_shared_route_b_takes_over_a_s_session_without_a_new_connection() -> None:
    s, log = handed(Route.SHARED)
    assert log == [] and s.b.label == "B" and cast(Any, s.b).log is cast(Any, s.a).log


def test_b_used_before_the_hand_over_is_a_harness_error() -> None:
    with pytest.raises(ProbeError, match="not connected before A's hand-over"):
        asyncio.run(NotYet().query("SELECT 1"))
