"""Progress goes through `logging` under the `leakcheck` logger; the plugin and the CLI show it."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace
from typing import Any, cast

import pytest

from leakcheck import plugin
from leakcheck.run import progress


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_a_modules_info_is_shown_as_one_leakcheck_line_and_hidden_again() -> None:
    logger, root = logging.getLogger("leakcheck"), logging.getLogger()
    outer = logger.level, logger.propagate  # a matrix run's plugin may be showing progress already
    logger.setLevel(logging.NOTSET)
    logger.propagate = True
    shown, at_root = _Lines(), _Lines()
    root.addHandler(at_root)
    try:
        hide = progress.show(shown)
        try:
            logging.getLogger("leakcheck.provision.postgres.server").info("initialising a template ...")
            assert (logger.level, logger.propagate) == (logging.INFO, False)
        finally:
            hide()
        assert shown.lines == ["leakcheck: initialising a template ..."]
        assert at_root.lines == []  # not propagated to root handlers (pytest's capture) while shown
        assert (logger.level, logger.propagate) == (logging.NOTSET, True) and shown not in logger.handlers
        logging.getLogger("leakcheck.provision.postgres.server").warning("after")
        assert shown.lines == ["leakcheck: initialising a template ..."] and at_root.lines == ["after"]
    finally:
        root.removeHandler(at_root)
        logger.setLevel(outer[0])
        logger.propagate = outer[1]


def test_the_plugin_writes_a_lane_threads_lines_only_from_the_main_thread(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class NoPlugins:
        def get_plugin(self, name: str) -> None:
            return None

    config = cast(pytest.Config, SimpleNamespace(pluginmanager=NoPlugins()))  # no terminal: stderr
    shown = plugin._ProgressLines(config)
    hide = progress.show(shown)
    try:
        lane = threading.Thread(target=lambda: logging.getLogger("leakcheck.run.lanes").info("from a lane"))
        lane.start()
        lane.join()
        assert capsys.readouterr().err == ""  # waiting for the main thread
        logging.getLogger("leakcheck.run.matrix").info("from the main thread")
        assert capsys.readouterr().err == "leakcheck: from a lane\nleakcheck: from the main thread\n"
        lane = threading.Thread(target=lambda: logging.getLogger("leakcheck.run.lanes").info("the last one"))
        lane.start()
        lane.join()
    finally:
        hide()
        shown.close()  # the plugin's last cleanup
    assert capsys.readouterr().err == "leakcheck: the last one\n"


def test_a_handler_that_fails_never_raises_into_the_code_that_logged(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> None:
        raise OSError("the terminal is gone")

    monkeypatch.setattr(plugin, "_say", broken)
    shown = plugin._ProgressLines(cast(pytest.Config, None))
    hide = progress.show(shown)
    try:
        logging.getLogger("leakcheck.provision.host.sweep").info("removed ...")
    finally:
        hide()
    assert "the terminal is gone" in capsys.readouterr().err  # logging's own report
