"""safe_tar.extract on small tarballs built here: tarfile's data filter and the check by hand."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from leakcheck.model.errors import ProvisionError
from leakcheck.provision.sources.safe_tar import HAS_DATA_FILTER, UnsafeArchive, extract

#: Both ways of checking, on the running Python: tarfile's filter (when it has one) and by hand.
WAYS = [
    pytest.param(
        True, id="data_filter", marks=pytest.mark.skipif(not HAS_DATA_FILTER, reason="Python < 3.11.4")
    ),
    pytest.param(False, id="by_hand"),
]

Member = Callable[[tarfile.TarFile], None]


def _file(name: str, data: bytes = b"x", mode: int = 0o644, mtime: int = 1_600_000_000, uid: int = 0) -> Member:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime, info.uid = len(data), mode, mtime, uid
        tar.addfile(info, io.BytesIO(data))

    return add


def _special(name: str, kind: bytes, linkname: str = "", mode: int = 0o755) -> Member:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.mode, info.mtime = kind, linkname, mode, 1_600_000_000
        tar.addfile(info)

    return add


def _tarball(folder: Path, *members: Member) -> Path:
    path = folder / "test.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for add in members:
            add(tar)
    return path


def _everything_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.parametrize("builtin", WAYS)
def test_a_release_like_tarball_unpacks_with_files_folders_and_links(tmp_path: Path, builtin: bool) -> None:
    archive = _tarball(
        tmp_path,
        _special("pkg", tarfile.DIRTYPE),
        _file("pkg/configure", b"#!/bin/sh\n", mode=0o755),
        _file("pkg/configure.ac", b"AC_INIT\n", mtime=1_500_000_000),
        _special("pkg/lib/libx.so", tarfile.SYMTYPE, "libx.so.1"),
        _file("pkg/lib/libx.so.1", b"ELF"),
        _special("pkg/copy", tarfile.LNKTYPE, "pkg/configure"),
    )
    dest = tmp_path / "out"
    extract(archive, dest, data_filter=builtin)
    assert (dest / "pkg" / "configure").read_bytes() == b"#!/bin/sh\n"
    assert os.access(dest / "pkg" / "configure", os.X_OK)
    assert os.readlink(dest / "pkg" / "lib" / "libx.so") == "libx.so.1"
    assert (dest / "pkg" / "lib" / "libx.so").read_bytes() == b"ELF"
    assert (dest / "pkg" / "copy").stat().st_ino == (dest / "pkg" / "configure").stat().st_ino
    # Timestamps are kept: make must not think configure.ac is newer than configure.
    assert (dest / "pkg" / "configure.ac").stat().st_mtime == 1_500_000_000
    assert (dest / "pkg" / "configure").stat().st_mtime == 1_600_000_000


@pytest.mark.parametrize("builtin", WAYS)
def test_setuid_bits_and_group_write_are_dropped_and_ownership_is_not_restored(
    tmp_path: Path, builtin: bool
) -> None:
    archive = _tarball(
        tmp_path,
        _file("suid", b"#!/bin/sh\n", mode=0o6777, uid=4242),
        _file("plain", mode=0o066),
    )
    dest = tmp_path / "out"
    extract(archive, dest, data_filter=builtin)
    suid = (dest / "suid").stat()
    assert stat.S_IMODE(suid.st_mode) == 0o755
    assert suid.st_uid == os.geteuid()  # never chowned to the archive's uid 4242
    assert stat.S_IMODE((dest / "plain").stat().st_mode) == 0o644


MALICIOUS = [
    pytest.param([_file("../evil")], "'..' component", id="dotdot"),
    pytest.param([_file("pkg/../../evil")], "'..' component", id="dotdot-inside"),
    pytest.param([_file("/tmp/evil-absolute")], "absolute path", id="absolute"),
    pytest.param([_special("passwd", tarfile.SYMTYPE, "/etc/passwd")], "absolute path", id="absolute-symlink"),
    pytest.param([_special("up", tarfile.SYMTYPE, "../..")], "pointing outside", id="symlink-outside"),
    pytest.param(
        [_special("a", tarfile.SYMTYPE, "."), _special("a/b", tarfile.SYMTYPE, "..")],
        "pointing outside",
        id="symlink-chain",
    ),
    pytest.param([_special("hard", tarfile.LNKTYPE, "/etc/shadow")], "absolute path", id="hardlink-absolute"),
    pytest.param([_special("dev", tarfile.CHRTYPE)], "special file", id="device"),
    pytest.param([_special("pipe", tarfile.FIFOTYPE)], "special file", id="fifo"),
]


@pytest.mark.parametrize("builtin", WAYS)
@pytest.mark.parametrize(("members", "why"), MALICIOUS)
def test_a_malicious_member_is_refused_and_nothing_lands_outside(
    tmp_path: Path, builtin: bool, members: list[Member], why: str
) -> None:
    box = tmp_path / "box"
    box.mkdir()
    archive = _tarball(tmp_path, _file("pkg/README"), *members)
    dest = box / "deep" / "out"
    with pytest.raises(UnsafeArchive) as raised:
        extract(archive, dest, data_filter=builtin)
    message = str(raised.value)
    assert "\n" not in message and message.startswith("test.tar.gz: refused to unpack it")
    if not builtin:  # tarfile's own filter words its errors itself
        assert why in message
    assert isinstance(raised.value, ProvisionError)
    assert _everything_under(box) <= {"deep", "deep/out", "deep/out/pkg", "deep/out/pkg/README", "deep/out/a"}
    assert not Path("/tmp/evil-absolute").exists()
