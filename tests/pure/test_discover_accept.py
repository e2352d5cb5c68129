"""`discover --fail-on=new|any --accept=FILE`: which findings fail the run, and bad files (pure: no server)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leakcheck.cli.main import main
from leakcheck.discover import accept, command, differential, engine, lab
from leakcheck.discover.compare import Comparison
from leakcheck.discover.findings import Discovery, Finding
from leakcheck.discover.ops import Abilities, Kind, Op, Who
from leakcheck.discover.options import Options
from leakcheck.model.target import Route
from leakcheck.model.versions import Version

OPS = (Op(Who.A, Kind.SET, "work_mem"), Op(Who.B, Kind.OBSERVE))
NEW = Finding(OPS, Comparison(()), "setting:work_mem", 1, True, (), ("session:work_mem",))
KNOWN = Finding(OPS, Comparison(()), "setting:statement_timeout", 1, True, ("statement_timeout",), ())
TOML = '[[accepted]]\nsignature = "setting:work_mem"\nreason = "set per transaction in our code"\n'


def test_with_fail_on_new_only_a_new_finding_nobody_accepted_fails_the_run() -> None:
    assert accept.failing([NEW, KNOWN], "new", {}) == [NEW]
    assert accept.failing([NEW, KNOWN], "new", {"setting:work_mem": "ours"}) == []


def test_with_fail_on_any_a_known_finding_fails_too_unless_accepted() -> None:
    assert accept.failing([NEW, KNOWN], "any", {"setting:work_mem": "ours"}) == [KNOWN]
    assert accept.failing([KNOWN], "any", {"setting:statement_timeout": "we use SET LOCAL"}) == []


def test_an_accept_file_in_toml_or_json_gives_each_signature_its_reason(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(TOML, encoding="utf-8")
    (tmp_path / "a.json").write_text('[{"signature": "setting:work_mem", "reason": "ours"}]', encoding="utf-8")
    (tmp_path / "b.json").write_text('{"accepted": [{"signature": "temp", "reason": "ours"}]}', encoding="utf-8")
    assert accept.load(tmp_path / "a.toml") == {"setting:work_mem": "set per transaction in our code"}
    assert accept.load(tmp_path / "a.json") == {"setting:work_mem": "ours"}
    assert accept.load(tmp_path / "b.json") == {"temp": "ours"}


@pytest.mark.parametrize(("name", "text", "said"), [
    ("a.toml", "[[accepted]\n", "not valid TOML"),
    ("a.json", "{", "not valid JSON"),
    ("a.json", '{"accepted": 3}', "expected a list of accepted findings"),
    ("a.json", '[{"signature": "temp"}]', "entry 1 must have exactly `signature` and `reason`"),
    ("a.json", '[{"signature": "temp", "reason": " "}]', "must be non-empty texts"),
    ("a.json", '[{"signature": "t", "reason": "r"}, {"signature": "t", "reason": "s"}]', "listed twice"),
])
def test_a_bad_accept_file_is_one_line_before_any_server_starts(
        name: str, text: str, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def no_lab(*args: object) -> None:
        raise AssertionError("a server was started")

    monkeypatch.setattr(lab, "open_lab", no_lab)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    code = main(["discover", "--pg=16", "--bouncer=1.24", f"--accept={path}"])
    err = capsys.readouterr().err
    assert code == 4 and err.count("\n") == 1 and said in err and str(path) in err


def test_a_missing_accept_file_and_an_unknown_fail_on_are_one_line_each(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["discover", "--pg=16", "--bouncer=1.24", f"--accept={tmp_path / 'none.toml'}"]) == 4
    assert "cannot read it" in capsys.readouterr().err
    assert main(["discover", "--pg=16", "--bouncer=1.24", "--fail-on=some"]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--fail-on" in err and "new or any" in err


class Found:
    """Stand-ins for the lab and the search: every run finds `findings` (what a seeded rerun finds)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, findings: list[Finding]) -> None:
        where = lab.LabRoute(Version.parse("16.14"), None, Route.DIRECT)

        @contextlib.contextmanager
        def open_lab(raw: dict[str, str | None], route: Route) -> Iterator[Any]:
            yield type("Lab", (), {"where": where})()

        class Measure:
            def __init__(self, *args: object, **kwargs: object) -> None: ...
            def __enter__(self) -> Any:
                return self
            def __call__(self, ops: object) -> Comparison:
                return Comparison(())
            def abilities(self) -> Abilities:
                return Abilities()
            start: tuple[object, ...] = ()
            def learn_start(self) -> tuple[object, ...]:
                return ()
            def __exit__(self, *args: object) -> None: ...

        monkeypatch.setattr(lab, "open_lab", open_lab)
        monkeypatch.setattr(differential, "Differential", Measure)
        monkeypatch.setattr(engine, "discover", lambda measure, search: Discovery(list(findings), [], "budget"))
        monkeypatch.setattr(engine, "confirm", lambda measure, found: iter(found))
        monkeypatch.setattr(command, "_checked", lambda lab, found, driver: found.findings)

    def run(self, fail_on: str = "new", accepted: dict[str, str] | None = None) -> int:
        opts = Options(cell=(("leakcheck_pg", "16"),), route=Route.DIRECT, budget=1.0, seed=1, fail_on=fail_on,
                       accepted=tuple((accepted or {}).items()))
        return command.run(opts)


def test_a_rerun_with_its_new_finding_accepted_exits_0_and_a_new_one_exits_1(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert Found(monkeypatch, [NEW, KNOWN]).run() == command.EXIT_NEW
    printed = re.findall(r"^discover: finding \d+: signature '([^']*)' \((\w+)\)$", capsys.readouterr().out, re.M)
    assert printed == [("setting:work_mem", "new"), ("setting:statement_timeout", "known")]
    accepted = {sig: "set per transaction in our code" for sig, label in printed if label == "new"}
    assert Found(monkeypatch, [NEW, KNOWN]).run(accepted=accepted) == command.EXIT_NOTHING_NEW
    assert "signature 'setting:work_mem' (accepted: set per transaction in our code)" in capsys.readouterr().out
    another = Finding(OPS, Comparison(()), "setting:temp_buffers", 1, True, (), ("session:temp_buffers",))
    assert Found(monkeypatch, [NEW, KNOWN, another]).run(accepted=accepted) == command.EXIT_NEW
    assert Found(monkeypatch, [NEW, KNOWN]).run("any", accepted) == command.EXIT_NEW  # the known one fails too
