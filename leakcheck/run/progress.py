"""Progress ("fetching ...", "building ...", "initialising a PostgreSQL ... template ...") goes through
`logging`: each module that reports some logs at INFO to its own logger, `logging.getLogger(__name__)`,
under the `leakcheck` logger. The pytest plugin and the CLI show it as `leakcheck: <message>` (`show`);
a program that imports leakcheck shows it, or not, like any library's logging.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterator

from leakcheck.model.safe_text import terminal_safe

LOGGER = "leakcheck"
FORMAT = "leakcheck: %(message)s"


class _Formatter(logging.Formatter):
    """`leakcheck: <message>`, with what a terminal could act on shown escaped (a message may quote a server)."""

    def format(self, record: logging.LogRecord) -> str:
        return terminal_safe(super().format(record))


def show(handler: logging.Handler) -> Callable[[], None]:
    """Show leakcheck's progress through `handler` alone, as `leakcheck: <message>`; returns the undo.

    While shown, the `leakcheck` logger takes INFO and does not propagate, so that a root handler
    (pytest's log capture) neither swallows nor repeats the lines.
    """
    logger = logging.getLogger(LOGGER)
    level, propagate = logger.level, logger.propagate
    handler.setFormatter(_Formatter(FORMAT))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False

    def hide() -> None:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate

    return hide


@contextlib.contextmanager
def on_stderr() -> Iterator[None]:
    """Progress on stderr while inside (the CLI's commands; their results go to stdout)."""
    hide = show(logging.StreamHandler(sys.stderr))
    try:
        yield
    finally:
        hide()
