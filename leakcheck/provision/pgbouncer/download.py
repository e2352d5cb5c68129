"""Downloading a PgBouncer release tarball, verified against the checksum published beside it.

Every download reads `<tarball URL>.sha256` first (sha256sum's format, as upstream publishes it);
when leakcheck's release table pins a checksum, the published one must equal it. The tarball is
then streamed into a hidden file while it is hashed, its length compared with Content-Length, its
hash with the published one, and it must unpack (gzip and tar read to the end). Only then is it
renamed into place; on any failure nothing is left behind. Both backends use this: the native one
builds the tarball, the containers one copies it into its image build.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import logging
import os
import posixpath
import re
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from leakcheck.model.errors import ProvisionError, one_line
from leakcheck.model.versions import Version
from leakcheck.provision.pgbouncer.releases import find_release, unknown_release

log = logging.getLogger(__name__)

CHECKSUM_SUFFIX = ".sha256"
DOWNLOAD_TIMEOUT = 15.0
MAX_CHECKSUM_BYTES = 4096
MAX_TARBALL_BYTES = 64 * 1024 * 1024  # releases are under 1 MB; more is not a release tarball
_CHUNK = 64 * 1024
_HEX = re.compile(r"^[0-9a-fA-F]{64}$")


class DownloadError(ProvisionError):
    """A tarball or its checksum could not be fetched, or they do not agree (nothing was kept)."""


def parse_checksum_file(text: str, filename: str) -> str:
    """The sha256 (lower-case hex) a sha256sum-style file gives for `filename`.

    Lines are `<64 hex digits>  <name>` (a `*` before the name marks binary mode); a file of one
    bare hex digest is accepted too. Anything else, or naming only other files, is a DownloadError.
    """
    entries: list[tuple[str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        digest, _, name = line.strip().partition(" ")
        name = name.strip().removeprefix("*")
        if not _HEX.match(digest) or "\x00" in name:
            raise DownloadError(f"not a sha256 checksum file (expected '<64 hex digits>  {filename}', "
                                f"got {one_line(line, 80)!r})")
        entries.append((digest.lower(), name))
    if not entries:
        raise DownloadError(f"an empty checksum file (expected '<64 hex digits>  {filename}')")
    if len(entries) == 1 and not entries[0][1]:
        return entries[0][0]
    for digest, name in entries:
        if name == filename or os.path.basename(name) == filename:
            return digest
    named = ", ".join(name or "(no name)" for _, name in entries)
    raise DownloadError(f"the checksum file names {one_line(named, 80)}, not {filename}")


def release_url(template: str, version: Version) -> str:
    """The tarball URL for `version` from a template with {version} (the upstream layout by default)."""
    return template.replace("{version}", str(version))


def fetch_release(version: Version, template: str, dest: Path, timeout: float = DOWNLOAD_TIMEOUT) -> Path:
    """dest/pgbouncer-<version>.tar.gz downloaded from `template`, verified (see fetch_verified).

    The release table's pin for `version`, when it has one, must match as well. A version the
    table does not know is still tried (a release newer than the table), verified against its
    published checksum only; when that fails, the error also says what the table knows.
    """
    url = release_url(template, version)
    entry = find_release(version)
    if entry is None or entry.sha256 is None:
        why = "is not in leakcheck's release table" if entry is None else "has no checksum pinned by leakcheck"
        log.info(f"PgBouncer {version} {why}: its download is checked against {url}{CHECKSUM_SUFFIX} only")
    try:
        return fetch_verified(url, dest / f"pgbouncer-{version}.tar.gz", entry.sha256 if entry else None, timeout)
    except DownloadError as exc:
        if entry is None:
            raise DownloadError(f"{exc} ({unknown_release(version)})") from None
        raise


def fetch_verified(url: str, target: Path, pinned: str | None = None, timeout: float = DOWNLOAD_TIMEOUT) -> Path:
    """Download `url` to `target`, checked against `url`.sha256 and `pinned`; `target`, or DownloadError.

    On failure no file is left at `target` or beside it.
    """
    published = published_checksum(url, timeout)
    if pinned is not None and published != pinned.lower():
        raise DownloadError(
            f"{url}{CHECKSUM_SUFFIX} gives sha256 {published}, but leakcheck's release table pins {pinned.lower()}: "
            "the release was republished or the mirror serves another file; nothing was downloaded "
            "(check it, then run scripts/update-pgbouncer-releases)"
        )
    partial = target.with_name(f".{target.name}.partial")
    try:
        log.info(f"downloading {url} ...")
        digest = _download(url, partial, timeout)
        if digest != published:
            raise DownloadError(f"{url} has sha256 {digest}, but {url}{CHECKSUM_SUFFIX} gives {published}: "
                                "the download is damaged or was altered; nothing was kept")
        problem = unpack_problem(partial)
        if problem:
            raise DownloadError(f"{url} matches its checksum but does not unpack ({problem}); nothing was kept")
        os.replace(partial, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return target


def unpack_problem(tarball: Path) -> str | None:
    """Why a .tar.gz cannot be read to its end (cut short, not gzip, not tar), else None."""
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            for member in tar:
                data = tar.extractfile(member) if member.isreg() else None
                while data is not None and data.read(_CHUNK):
                    pass
    except (OSError, EOFError, tarfile.TarError, zlib.error, gzip.BadGzipFile) as exc:
        return one_line(exc, 120) or type(exc).__name__
    return None


def published_checksum(url: str, timeout: float = DOWNLOAD_TIMEOUT) -> str:
    """The sha256 published beside the tarball at `url` (`url`.sha256); DownloadError when unreadable."""
    where = f"{url}{CHECKSUM_SUFFIX}"
    with _open(where, timeout, "its published checksum") as response:
        raw = response.read(MAX_CHECKSUM_BYTES + 1)
    if len(raw) > MAX_CHECKSUM_BYTES:
        raise DownloadError(f"{where} is longer than {MAX_CHECKSUM_BYTES} bytes: not a checksum file")
    try:
        return parse_checksum_file(raw.decode("ascii"), url_file_name(url))
    except UnicodeDecodeError:
        raise DownloadError(f"{where}: not a sha256 checksum file (not ASCII text)") from None
    except DownloadError as exc:
        raise DownloadError(f"{where}: {exc}") from None


def _download(url: str, partial: Path, timeout: float) -> str:
    """Stream `url` into `partial`; its sha256. DownloadError when it is cut short or too big."""
    hasher = hashlib.sha256()
    received = 0
    with _open(url, timeout, "the release tarball") as response, open(partial, "wb") as out:
        announced = _content_length(response)
        try:
            while chunk := response.read(_CHUNK):
                received += len(chunk)
                if received > MAX_TARBALL_BYTES:
                    raise DownloadError(f"{url} is larger than {MAX_TARBALL_BYTES >> 20} MB: not a release tarball")
                hasher.update(chunk)
                out.write(chunk)
        except (OSError, http.client.HTTPException) as exc:
            raise DownloadError(f"{url}: the download broke off after {received} bytes ({one_line(exc, 80)})") from None
    if announced is not None and received != announced:
        raise DownloadError(f"{url}: the server announced {announced} bytes but sent {received} "
                            "(the download was cut short); nothing was kept")
    return hasher.hexdigest()


def _content_length(response: BinaryIO) -> int | None:
    headers = getattr(response, "headers", None)
    value = headers.get("Content-Length") if headers is not None else None
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def url_file_name(url: str) -> str:
    """The file name a URL ends in ('.../1.24.1/pgbouncer-1.24.1.tar.gz' -> 'pgbouncer-1.24.1.tar.gz')."""
    return posixpath.basename(urllib.parse.unquote(urllib.parse.urlsplit(url).path))


@contextlib.contextmanager
def _open(url: str, timeout: float, what: str) -> Iterator[BinaryIO]:
    try:
        response = urllib.request.urlopen(url, timeout=timeout)
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the error page's connection
        raise DownloadError(f"{url}: HTTP {exc.code} {exc.reason} (cannot read {what})") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:  # URLError is an OSError; ValueError: a bad URL
        reason = getattr(exc, "reason", None) or exc
        raise DownloadError(f"{url}: {one_line(reason, 120)} (cannot read {what})") from None
    with response:
        yield response
