"""How long `stop_together` lets each agent end before its SIGTERM: its hello's `ends_within` on top of a full stop's
grace, never in a hurried stop (Ctrl-C, the clean-up at exit), which stays as short as asked."""

from __future__ import annotations

from typing import Any, cast

import pytest

from leakcheck.drivers.agents.process import STOP_TIMEOUT, TERM_TIMEOUT, AgentProcess, stop_together


class _Stopped:
    """Only what stop_together reads of an agent, and the grace it was given."""

    def __init__(self, pid: int, ends_within: float) -> None:
        self.pid, self.ends_within, self.grace = pid, ends_within, -1.0

    def stop(self, grace: float) -> None:
        self.grace = grace


@pytest.mark.parametrize(("grace", "expected"), [(STOP_TIMEOUT, STOP_TIMEOUT + 25), (TERM_TIMEOUT, TERM_TIMEOUT),
                                                 (0.0, 0.0)])
def test_an_agent_that_says_it_ends_later_gets_that_long_only_in_a_full_stop(grace: float, expected: float) -> None:
    slow, quick = _Stopped(1, 25.0), _Stopped(2, 0.0)
    stop_together(cast(list[AgentProcess], cast(Any, [slow, quick])), grace)
    assert (slow.grace, quick.grace) == (expected, grace)
