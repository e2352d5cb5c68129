"""Server text reaches a terminal inert: every control character shown as its escape (pure, tmp_path)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from leakcheck import plugin
from leakcheck.cli import main as cli
from leakcheck.cli.exits import guarded
from leakcheck.model.errors import StartError
from leakcheck.model.safe_text import terminal_safe
from leakcheck.model.target import Route
from leakcheck.model.verdicts import Verdict
from leakcheck.reports.terminal import render_matrix
from leakcheck.results import results
from leakcheck.results.results import Results
from leakcheck.run import progress
from tests.pure.outcomes import at, make, pooler

#: A colour, a window title, a carriage return that would rewrite the line, a C1 CSI, a bidi override.
HOSTILE = "\x1b[31mred\x1b[0m \x1b]0;owned\x07 \rover \x9b2J \u202eeman \x00\x7f"


def test_server_text_reaches_a_terminal_with_its_control_characters_shown_escaped() -> None:
    safe = terminal_safe(HOSTILE + "\ttab\nline two")
    assert safe == ("\\x1b[31mred\\x1b[0m \\x1b]0;owned\\x07 \\x0dover \\x9b2J \\u202eeman \\x00\\x7f"
                    "\ttab\nline two")
    assert terminal_safe("a\nb", newlines=False) == "a\\nb"
    assert terminal_safe("\ud800") == "\\ud800"  # a lone surrogate would stop print() itself


def test_merge_prints_a_failures_evidence_without_its_escape_sequences(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    leak = make("statement_timeout", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.LEAKS,
                f"B saw {HOSTILE}\nsecond line")
    results.save(tmp_path / "a.json", Results((leak,)))
    assert cli.main(["merge", str(tmp_path / "a.json")]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out
    failed = [line for line in out.splitlines() if line.startswith("FAILED")]
    assert failed == [f"FAILED {results.name_of(leak)}: LEAKS: B saw {terminal_safe(HOSTILE)}\\nsecond line"]


def test_the_terminal_matrix_shows_a_pooler_named_with_escapes_inert() -> None:
    named = pooler("dsn", config="stage\x1b[2J")
    text = render_matrix([at("statement_timeout", Verdict.LEAKS, named)], color=True)
    assert "\x1b[2J" not in text and "stage\\x1b[2J" in text
    assert "\x1b[1;31mLEAKS\x1b[0m" in text  # leakcheck's own colours stay


def test_an_error_quoting_a_server_log_keeps_its_lines_and_loses_its_escapes(
        capsys: pytest.CaptureFixture[str]) -> None:
    def body() -> int:
        raise StartError.with_log("PgBouncer 1.24.1", "it exited", "FATAL \x1b[31mbad\x1b[0m\nLOG \x1b]0;x\x07")

    assert guarded(body) == 4
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err
    assert "FATAL \\x1b[31mbad\\x1b[0m\nLOG \\x1b]0;x\\x07" in err


def test_progress_quoting_a_server_is_shown_inert() -> None:
    lines: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    hide = progress.show(Lines())
    try:
        logging.getLogger("leakcheck.provision").info("server said %s", "\x1b[31mhi")
    finally:
        hide()
    assert lines == ["leakcheck: server said \\x1b[31mhi"]


def test_reports_of_evidence_holding_a_lone_surrogate_are_still_written(tmp_path: Path) -> None:
    # JSON can spell a lone surrogate ("\ud800"); no UTF-8 file can hold one.
    leak = make("statement_timeout", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.LEAKS, "x\ud800y")
    results.save(tmp_path / "a.json", Results((leak,)))
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    assert cli.main(["merge", str(tmp_path / "a.json"), f"--report-html={html}", f"--report-md={md}"]) == 1
    assert "x\\ud800y" in html.read_text(encoding="utf-8") and "x\\ud800y" in md.read_text(encoding="utf-8")


def test_a_leak_tests_failure_message_reaches_pytests_terminal_inert() -> None:
    # repr_failure is what pytest prints for the test (and writes into its JUnit failure); for a
    # failed verdict it reads only the exception.
    with pytest.raises(plugin.LeakFound) as excinfo:
        raise plugin.LeakFound(f"LEAKS: B saw {HOSTILE}\nline two")
    shown = plugin.LeakItem.repr_failure(cast(Any, SimpleNamespace()), excinfo)
    assert shown == f"LEAKS: B saw {terminal_safe(HOSTILE)}\nline two" and "\x1b" not in shown
