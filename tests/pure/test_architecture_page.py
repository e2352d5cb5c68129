"""docs/architecture.md draws the tree as it is: every room of the package and of provision/ is on it."""

from __future__ import annotations

import ast
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


#: The drawing's lines, top to bottom: a room may import from its own line and those below.
LAYERS = {"leakcheck": 4, "cli": 4, "plugin": 4, "gate": 3, "results": 3, "reports": 3, "discover": 3, "scan": 3,
          "run": 2, "config": 2, "probes": 1, "drivers": 1, "provision": 1, "model": 0}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, modules: set[str]) -> set[str]:
    """The leakcheck modules `path` imports (`from leakcheck.gate import judge` is gate.judge)."""
    found: set[str] = set()
    here = _module(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
    return {name for name in found if name.startswith("leakcheck")}


def _room(module: str) -> str:
    return module.split(".")[1] if "." in module else "leakcheck"


def imports_between_rooms() -> list[str]:
    """The page's list, made from the code: per edge, the distinct module-to-module imports."""
    files = sorted((ROOT / "leakcheck").rglob("*.py"))
    modules = {_module(p) for p in files}
    edges: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for path in files:
        source = _module(path)
        for target in _imported(path, modules):
            if _room(source) != _room(target):
                edges.setdefault((_room(source), _room(target)), set()).add((source, target))
    lines = []
    for (a, b), pairs in sorted(edges.items()):
        line = f"- `{a}` -> `{b}` ({len(pairs)})"
        if LAYERS[b] > LAYERS[a]:
            named = sorted(f"{s.removeprefix('leakcheck.')} -> {t.removeprefix('leakcheck.')}" for s, t in pairs)
            line += " **up**: " + "; ".join(named)
        lines.append(line)
    return lines


def test_the_imports_between_rooms_on_the_page_are_the_imports_in_the_code() -> None:
    on_page = [line for line in PAGE.splitlines() if line.startswith("- `")]
    assert on_page == imports_between_rooms(), "paste into docs/architecture.md:\n" + "\n".join(imports_between_rooms())


def test_every_room_is_on_a_line_of_the_drawing() -> None:
    assert sorted(set(_drawn(ROOT / "leakcheck")) - {"plugin.py"}) == sorted(
        f"{room}/" for room in LAYERS if room not in ("leakcheck", "plugin"))
