"""Evidence in plain words: every probe's evidence, rendered from fake clients' answers (pure: no server).

Each probe runs against clients that answer every statement alike: a NULL (a driver's None), a
number, a text, an error the server never gave a SQLSTATE, or a setting no ParameterStatus reported.
Most of these answers make a probe give up (a harness error, which is not evidence); every
Observation that comes out is checked for Python's words (`None`), the drivers' placeholder SQLSTATE
(`?????`) and phrases that read as nonsense.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from leakcheck.drivers.interface import CopyIn, Notification, Piped, Pipelined, Row, ServerError
from leakcheck.model.faults import NO_SQLSTATE
from leakcheck.model.target import Route
from leakcheck.probes import PROBES
from leakcheck.probes.base import IDENTITY, Attempt
from leakcheck.probes.scenario import Scenario

TAG = re.compile(r" /\* leakcheck \w+ \w+ \*/$")
FORBIDDEN = re.compile(r"\bNone\b|\?\?\?\?\?|was told not reported|from built from")


@dataclass
class Answering:
    """A client whose every statement gives `value` (or fails without SQLSTATE when `fail`), with proofs."""

    label: str
    value: Any
    fail: bool = False
    notifications: list[Notification] = field(default_factory=list)
    statement_names: str = "false"
    settings: tuple[Any, ...] = ()

    async def query(self, sql: str) -> list[Row]:
        sql = TAG.sub("", sql)  # the witness's comment (probes/witness.py): no witness here
        if sql == f"SELECT {IDENTITY}" or "FROM pg_stat_activity" in sql:
            return [(1, "1")]
        if self.fail and sql.split()[0].upper() not in ("BEGIN", "COMMIT", "ROLLBACK"):
            raise ServerError(NO_SQLSTATE, "the driver could not decode the answer")
        return [(self.value, 1, "1")] if sql.endswith(IDENTITY) else [(self.value,)]

    async def execute(self, sql: str) -> None:
        await self.query(sql)

    async def prepared(self, sql: str) -> list[Row]:
        return await self.query(sql)

    async def begin(self) -> None:
        return None

    async def commit(self) -> None:
        return None

    async def rollback(self) -> None:
        return None

    async def free(self, sql: str) -> None:
        return None

    async def bind(self, name: str) -> list[Row]:
        return await self.query(f"EXECUTE {name}")

    async def copy_in(self, copy: CopyIn) -> None:
        return None

    async def pipeline(self, commands: tuple[Piped, ...]) -> Pipelined:
        return Pipelined(())

    def protocol(self) -> str | None:
        return None

    def reported(self, name: str) -> str | None:
        return None

    def alias(self, label: str) -> Answering:
        return Answering(label, self.value, self.fail)

    async def cancel(self) -> bool:
        return False

    async def close(self) -> None:
        return None


ANSWERS: list[tuple[Any, bool]] = [(None, False), (0, False), (1, False), ("x", False), ([], False), (None, True)]


def evidence(value: Any, fail: bool, b_value: Any = None) -> dict[str, str]:
    """Each probe's evidence when every statement answers alike (B's with `b_value` when given; probes that
    gave up are left out)."""
    said: dict[str, str] = {}
    for p in PROBES:
        def client(label: str) -> Any:
            return Answering(label, b_value if label == "B" and b_value is not None else value, fail)

        async def another(label: str = "B") -> Any:
            return client(label)

        s = Scenario(a=client("A"), b=client("B"), route=Route.TRANSACTION, third=lambda: another("C"),
                     next_b=another)

        async def one(body: Any = p.body, s: Scenario = s) -> Any:
            return await asyncio.wait_for(body(s), timeout=5)

        try:
            said[p.id] = asyncio.run(one()).evidence
        except Exception:  # noqa: BLE001 - a probe that gives up on nonsense answers says nothing here
            continue
    return said


@pytest.mark.parametrize(("value", "fail"), ANSWERS)
def test_no_probe_s_evidence_says_none_or_an_unknown_sqlstate_placeholder(value: Any, fail: bool) -> None:
    said = evidence(value, fail)
    bad = {probe: text for probe, text in said.items() if FORBIDDEN.search(text)}
    assert bad == {}


def test_the_answers_above_do_reach_the_evidence_of_many_probes() -> None:
    # Without this the test above could pass by every probe giving up.
    reached = set().union(*(evidence(value, fail) for value, fail in ANSWERS))
    assert len(reached) >= len(PROBES) // 3, sorted(reached)


def test_a_statement_that_returned_nothing_and_an_error_without_sqlstate_read_as_words() -> None:
    assert str(Attempt(value=None)) == "success (no value)"
    assert str(Attempt(error=ServerError(NO_SQLSTATE, "lost"))) == "an error without SQLSTATE: lost"
    assert str(Attempt(error=ServerError("42P05", "exists"))) == "error 42P05: exists"


def test_a_setting_no_parameter_status_reported_is_said_so() -> None:
    said = evidence("a", False, b_value="b")
    assert "no ParameterStatus told its driver" in said["timezone"], said
