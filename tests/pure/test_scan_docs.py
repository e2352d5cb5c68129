"""docs/scan.md's worked examples are what the commands it shows print, and its table names every probe the
map names."""

from __future__ import annotations

from pathlib import Path

import pytest

from leakcheck.cli.main import main
from leakcheck.scan.mapping import CUSTOM, KINDS, LOCAL_CUSTOM, OTHER, PARAMETERS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples" / "scan"
PAGE = (ROOT / "docs" / "scan.md").read_text(encoding="utf-8")
#: The commands of the page's examples (the page shows them) and the files holding what they print.
SCAN = ["scan", "--results=docs/measured/native-bookworm.results.json.gz", "--pg=18", "--bouncer=1.18,1.26",
        "--drivers=psycopg", "docs/examples/scan/postgresql.log", "docs/examples/scan/pgss.csv",
        "docs/examples/scan/migrations"]
REPO = ["scan", "--repo=docs/examples/scan/repo"]


@pytest.mark.parametrize(("argv", "printed", "code"), [(SCAN, "scan.txt", 1), (REPO, "repo.txt", 0)])
def test_an_example_on_the_scan_page_is_what_its_command_prints(argv: list[str], printed: str, code: int,
                                                               capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("NO_COLOR", "1")
    capsys.readouterr()
    assert main(argv) == code
    assert capsys.readouterr().out == (EXAMPLES / printed).read_text(encoding="utf-8"), \
        f"docs/examples/scan/{printed} is stale: run leakcheck {' '.join(argv)} > docs/examples/scan/{printed}"
    assert f'--8<-- "docs/examples/scan/{printed}"' in PAGE


def test_the_scan_page_names_every_probe_the_map_names() -> None:
    named = {p for probes, _ in KINDS.values() for p in probes} | {p for ps in PARAMETERS.values() for p in ps}
    named |= set(CUSTOM) | set(OTHER) | set(LOCAL_CUSTOM)
    assert sorted(p for p in named if f"`{p}`" not in PAGE) == []
