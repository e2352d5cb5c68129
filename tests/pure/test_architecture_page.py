"""docs/architecture.md draws the tree as it is: every room of the package and of provision/ is on it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _drawn(folder: Path) -> list[str]:
    """The folders and modules of `folder` as the page names them (`run/`, `plugin.py`)."""
    return sorted(f"{p.name}/" if p.is_dir() else p.name for p in folder.iterdir()
                  if p.name not in ("__init__.py", "__pycache__", "py.typed"))


def test_every_room_of_the_package_is_drawn_on_the_architecture_page() -> None:
    assert [name for name in _drawn(ROOT / "leakcheck") if name not in PAGE] == []


def test_every_folder_and_module_of_provision_is_drawn_on_the_architecture_page() -> None:
    tree = PAGE.split("provision/\n", 1)[1].split("```", 1)[0]
    assert [name for name in _drawn(ROOT / "leakcheck" / "provision") if name.removesuffix("/") not in tree] == []
