"""Retrying a server start when another process took its port (pure control flow)."""

import pytest

from leakcheck.provision.host.system import PortClash, start_retrying_port_clash


def test_a_port_clash_is_retried_after_stopping_the_failed_start() -> None:
    calls: list[str] = []

    def start() -> None:
        calls.append("start")
        if calls.count("start") == 1:
            raise PortClash("taken")

    start_retrying_port_clash(start, lambda: calls.append("stop"), attempts=3)
    assert calls == ["start", "stop", "start"]


def test_the_last_clash_is_raised_after_every_attempt_was_stopped() -> None:
    stops: list[int] = []

    def start() -> None:
        raise PortClash("taken")

    with pytest.raises(PortClash):
        start_retrying_port_clash(start, lambda: stops.append(1), attempts=2)
    assert len(stops) == 2


def test_other_start_errors_are_not_retried() -> None:
    def start() -> None:
        raise RuntimeError("bad config")

    with pytest.raises(RuntimeError):
        start_retrying_port_clash(start, lambda: pytest.fail("stop must not run"), attempts=3)
