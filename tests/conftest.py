"""The suite's session rules: its own cache (tests/support/cache.py) and, for the tier without
servers, the audit hook of tests/support/tier_guard.py that fails a test reaching a network or a server."""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

from leakcheck.plugin import matrix_only
from tests.support.cache import use_test_cache
from tests.support.tier_guard import WATCH


def _watched(item: pytest.Item) -> bool:
    return not any(item.get_closest_marker(mark) for mark in ("servers", "containers", "browser", "leakcheck"))


def _guarded(item: pytest.Item) -> Generator[None, Any, Any]:
    if not _watched(item):
        return (yield)
    WATCH.seen.clear()
    WATCH.on = True
    try:
        outcome = yield
    except BaseException:
        outcome = None
        if not WATCH.seen:
            raise
    finally:
        WATCH.on = False
    if WATCH.seen:
        pytest.fail("this test is in the pure tier but it "
                    f"{'; '.join(dict.fromkeys(WATCH.seen))}: move it to tests/servers", pytrace=False)
    return outcome


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
    return (yield from _guarded(item))



@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Every test, child and xdist worker uses the suite's own cache (tests/support/cache.py). The
    README's main command typed in this clone loads this file too, but runs no test of it (a matrix
    option and no paths): the matrix then uses the user's one cache, as it does typed anywhere else."""
    if matrix_only(config):
        return
    use_test_cache(os.environ)


#: The tiers are the folders: a test gets the mark of the folder it lives in.
TIERS = ("servers", "containers", "browser")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.parts
        for tier in TIERS:
            if tier in parts and parts[parts.index(tier) - 1] == "tests" and not item.get_closest_marker(tier):
                item.add_marker(getattr(pytest.mark, tier))
