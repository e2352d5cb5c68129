"""Files given to leakcheck that are FIFOs, devices, too large or nested too deep: one line, never a hang."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from leakcheck.config import inputs, matrix_file
from leakcheck.config.config import Config
from leakcheck.gate import expectations
from leakcheck.model.errors import UsageError
from leakcheck.results import results

READERS: dict[str, Callable[[Path], object]] = {
    "matrix": matrix_file.load,
    "baseline": lambda p: expectations.read(p, "--expect", "record one"),
    "results": results.load,
    "bouncer ini": lambda p: Config.from_strings({"leakcheck_bouncer_ini": str(p), "leakcheck_bouncer": "1.24"}),
}


@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
def test_a_fifo_given_as_a_file_is_one_line_and_never_opened(tmp_path: Path, reader: Callable[[Path], object]) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it for reading would block until a writer comes: the test would hang
    with pytest.raises(UsageError, match="is a FIFO"):
        reader(fifo)


@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
def test_a_device_given_as_a_file_is_one_line(reader: Callable[[Path], object]) -> None:
    with pytest.raises(UsageError, match="is a character device"):
        reader(Path("/dev/zero"))  # read_text would never end


@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
def test_a_file_larger_than_the_limit_is_one_line(tmp_path: Path, reader: Callable[[Path], object]) -> None:
    big = tmp_path / "big"
    with big.open("wb") as handle:
        handle.truncate(inputs.MAX_BYTES + 1)  # sparse: no disk used
    with pytest.raises(UsageError, match="MiB leakcheck reads"):
        reader(big)


DEEP = {
    "matrix": "pg = " + "[" * 100_000 + "]" * 100_000 + "\n",
    "baseline": "x = " + "[" * 100_000 + "]" * 100_000 + "\n",
    "results": "[" * 100_000 + "]" * 100_000,
}


@pytest.mark.parametrize("reader", ["matrix", "baseline", "results"])
def test_a_file_nested_too_deeply_is_one_line_not_a_recursion_error(tmp_path: Path, reader: str) -> None:
    deep = tmp_path / "deep"
    deep.write_text(DEEP[reader])
    with pytest.raises(UsageError, match="nested too deeply"):
        READERS[reader](deep)


@pytest.mark.parametrize(("reader", "what"), [("baseline", "a leakcheck baseline"),
                                              ("results", "a leakcheck results file")])
def test_a_baseline_or_results_file_that_is_not_utf8_or_missing_is_one_line_naming_it(tmp_path: Path, reader: str,
                                                                                    what: str) -> None:
    latin = tmp_path / "latin1"
    latin.write_bytes(b'{"caf\xe9": 1}')
    with pytest.raises(UsageError, match=f"latin1 is not UTF-8 text, so not {what}; ") as caught:
        READERS[reader](latin)
    assert "\n" not in str(caught.value)
    with pytest.raises(UsageError, match="missing does not exist; "):
        READERS[reader](tmp_path / "missing")
