"""`discover --fail-on=new|any --accept=FILE`: which findings fail the run, and bad files (pure: no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from leakcheck.cli.main import main
from leakcheck.discover import accept, lab
from leakcheck.discover.compare import Comparison
from leakcheck.discover.findings import Finding
from leakcheck.discover.ops import Kind, Op, Who

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
