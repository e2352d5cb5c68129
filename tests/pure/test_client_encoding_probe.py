"""client_encoding's read of 'é' by B: only a driver that cannot decode the bytes is the finding; a harness
failure at that step (a timeout, a proof the witness contradicts, a stalled pool, a refusal) stays what it is,
never a recordable leak."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from leakcheck.model.errors import NotApplicable, ProbeError
from leakcheck.model.verdicts import Observation
from leakcheck.probes.outcomes import Stalled
from leakcheck.probes.security import client_encoding


class _Steps:
    """B reads its own client_encoding (UTF8, no leak); its read of 'é' raises `failure`."""

    def __init__(self, failure: BaseException | None) -> None:
        self.a, self.b = SimpleNamespace(label="A"), SimpleNamespace(label="B")
        self.failure = failure

    async def change(self, client: Any, step: str, sql: str) -> None:
        return None

    async def observe(self, client: Any, step: str, expr: str) -> Any:
        if expr == "'é'::text":
            if self.failure is not None:
                raise self.failure
            return "é"
        return "LATIN1" if client.label == "A" else "UTF8"


def _run(failure: BaseException | None) -> Observation:
    return asyncio.run(client_encoding.body(_Steps(failure)))  # type: ignore[arg-type]


@pytest.mark.parametrize("failure", [
    TimeoutError("B's 'read a non-ASCII text' did not return within 10 s"),
    ProbeError("B reported server connection pid 7 at 'read a non-ASCII text', but the server shows pid 8"),
    Stalled("B's 'read a non-ASCII text' waited 10 s for a server connection: the pool stalled"),
    NotApplicable("B's driver refused to go on"),
], ids=lambda e: type(e).__name__)
def test_a_harness_failure_at_b_s_read_of_a_non_ascii_text_is_never_a_leak(failure: BaseException) -> None:
    with pytest.raises(type(failure)):
        _run(failure)


def test_a_driver_that_cannot_decode_the_bytes_is_the_leak() -> None:
    got = _run(UnicodeDecodeError("utf-8", b"\xe9", 0, 1, "invalid continuation byte"))
    assert got.leaked and "UnicodeDecodeError" in got.evidence
    assert not _run(None).leaked
