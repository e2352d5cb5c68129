"""Unpacking downloaded tarballs without trusting them, on every Python 3.11.

`tarfile`'s `filter="data"` exists from Python 3.11.4 on (Debian 12 has 3.11.2). Where it
exists it is used; either way every member is first checked here: no absolute or `..` names, no
links that point outside the destination, nothing but files, folders and links. Without the
filter the same rules are applied by hand, ownership is never restored and setuid/setgid/sticky
bits and group/other write bits are dropped (as the data filter does).
"""

from __future__ import annotations

import os
import sys
import tarfile
from pathlib import Path, PurePosixPath

from leakcheck.model.errors import ProvisionError

HAS_DATA_FILTER = hasattr(tarfile, "data_filter")


class UnsafeArchive(ProvisionError):
    """A member would land outside the destination, or is a device, fifo or other special file."""


def extract(archive: Path, dest: Path, *, data_filter: bool | None = None) -> None:
    """Unpack `archive` into `dest` (created if needed); UnsafeArchive names the first bad member.

    `data_filter` chooses tarfile's own filter (None: use it when this Python has it); False
    forces the check by hand, which is what runs on Python < 3.11.4.
    """
    use_filter = HAS_DATA_FILTER if data_filter is None else data_filter
    if use_filter and not HAS_DATA_FILTER:
        raise ValueError(f"this Python ({sys.version.split()[0]}) has no tarfile data filter")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        for member in members:
            _check_static(archive, member)
        if use_filter:
            try:
                tar.extractall(dest, filter="data")
            except tarfile.FilterError as exc:  # e.g. a link through a link that leaves `dest`
                raise UnsafeArchive(f"{archive.name}: refused to unpack it: {exc}") from exc
        else:
            _extract_by_hand(archive, tar, members, dest)


def _check_static(archive: Path, member: tarfile.TarInfo) -> None:
    """The rules that need no file system: names, link names and member types."""
    name = PurePosixPath(member.name)
    if name.is_absolute() or os.path.isabs(member.name):
        raise _refused(archive, member, "has an absolute path")
    if ".." in name.parts:
        raise _refused(archive, member, "has a '..' component")
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        raise _refused(archive, member, "is a device, fifo or other special file")
    if (member.issym() or member.islnk()) and (
        os.path.isabs(member.linkname) or PurePosixPath(member.linkname).is_absolute()
    ):
        raise _refused(archive, member, f"is a link to the absolute path {member.linkname!r}")


def _refused(archive: Path, member: tarfile.TarInfo, why: str) -> UnsafeArchive:
    return UnsafeArchive(f"{archive.name}: refused to unpack it: member {member.name!r} {why}")


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def _extract_by_hand(archive: Path, tar: tarfile.TarFile, members: list[tarfile.TarInfo], dest: Path) -> None:
    root = os.path.realpath(dest)
    folders: list[tuple[str, tarfile.TarInfo]] = []
    tar.errorlevel = 2  # raise every error instead of skipping the member
    for member in members:
        # Checked just before each member is written, so links unpacked earlier are followed.
        target = os.path.realpath(os.path.join(root, member.name))
        if not _inside(target, root):
            raise _refused(archive, member, "would be written outside the destination")
        if member.issym() or member.islnk():
            base = os.path.dirname(member.name) if member.issym() else ""
            pointed = os.path.realpath(os.path.join(root, base, member.linkname))
            if not _inside(pointed, root):
                raise _refused(archive, member, f"is a link pointing outside the destination ({member.linkname!r})")
        tar.extract(member, root, set_attrs=False)  # set_attrs=False: no chown, no mode, no mtime
        path = os.path.join(root, member.name)
        if member.isreg():
            os.chmod(path, _file_mode(member.mode))
            os.utime(path, (member.mtime, member.mtime))  # builds compare timestamps (configure, make)
        elif member.isdir():
            folders.append((path, member))
    for path, member in reversed(folders):  # after their contents, so nothing changes them again
        os.chmod(path, 0o755)
        os.utime(path, (member.mtime, member.mtime))


def _file_mode(mode: int) -> int:
    """The data filter's rule: no high bits, no group/other write; owner rw; x only if owner had x."""
    mode &= 0o755
    if not mode & 0o100:
        mode &= ~0o111
    return mode | 0o600
