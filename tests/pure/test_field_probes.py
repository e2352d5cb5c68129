"""The pure parts of the probes from bugs users hit in 2025-2026: how a pipeline's answers are judged, and
what each shipped agent says it cannot do."""

from __future__ import annotations

from leakcheck.drivers.agents.catalogue import CATALOGUE
from leakcheck.drivers.interface import PipedResult
from leakcheck.probes import PROBES
from leakcheck.probes.protocol import _expected


def test_a_pipeline_whose_answers_came_in_order_is_not_called_wrong() -> None:
    got = (PipedResult("COMMAND_OK"), PipedResult("COMMAND_OK"), PipedResult("TUPLES_OK", "x"))
    assert _expected(got, ("COMMAND_OK", "COMMAND_OK", "TUPLES_OK")) is None


def test_a_close_that_got_the_execute_s_rows_is_named_with_what_belonged_there() -> None:
    got = (PipedResult("COMMAND_OK"), PipedResult("TUPLES_OK", "x"), PipedResult("no result"))
    assert _expected(got, ("COMMAND_OK", "COMMAND_OK", "TUPLES_OK")) == (
        "command 2: TUPLES_OK ('x') where COMMAND_OK belongs; command 3: no result where TUPLES_OK belongs")


def test_a_piped_result_says_its_error_or_its_value() -> None:
    assert str(PipedResult("FATAL_ERROR", error="0A000: no")) == "FATAL_ERROR (0A000: no)"
    assert str(PipedResult("TUPLES_OK", "v")) == "TUPLES_OK ('v')"
    assert str(PipedResult("COMMAND_OK")) == "COMMAND_OK"


def test_every_shipped_agent_says_in_its_driver_s_words_why_it_cannot_ask_for_protocol_3_2_or_pipeline() -> None:
    for shipped in CATALOGUE:
        for words in (shipped.protocols, shipped.pipeline):
            assert "agent protocol 1" not in words, (shipped.spec.id, words)  # the driver's reason, not the default


def test_only_the_protocol_probe_asks_for_a_protocol_version() -> None:
    assert [p.id for p in PROBES if p.protocol] == ["cancel_own_protocol_32"]
