"""Folders the server user may enter: pytest's own temporary folders are private to root (0700), and
leakcheck refuses a team file the server user could not read itself (a copy would hand it over)."""

from __future__ import annotations

from pathlib import Path


def let_the_server_user_enter(folder: Path) -> Path:
    """Give every folder from `folder` up to the temporary root the search bit for others (0o001:
    enter, not list), so a 0644 file in `folder` is readable by the server user; returns `folder`."""
    for path in (folder, *folder.parents):
        if path in (Path("/"), Path("/tmp")):
            break
        path.chmod(path.stat().st_mode | 0o001)
    return folder
