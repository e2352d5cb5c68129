"""Debian packages from other suites through a private apt set-up (the machine's own apt is untouched).

Everything apt reads or writes lives under one folder of the cache: the sources lists, the
package lists (refreshed at most once a day and once a run), an empty dpkg status (so what this
machine has installed never becomes a candidate) and apt's caches. Only the machine's apt.conf.d
is shared, for proxies; its update hooks are cleared.

apt's own lock is private too: `apt-get update` takes an fcntl lock on lists/lock under that
folder (never /var/lib/apt or dpkg's), and downloads take none. An fcntl lock dies with its
process, so a lock file left behind is harmless; what used to block the next run was an apt-get
that outlived a killed leakcheck and still held the lock. Every apt child now dies with us
(children.run).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from leakcheck.model.errors import ProvisionError
from leakcheck.provision.host import children
from leakcheck.provision.host.system import file_lock

log = logging.getLogger(__name__)

SUITES = ("bookworm", "trixie", "sid")
DEFAULT_ARCHIVE = "http://deb.debian.org/debian"
DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
LIST_MAX_AGE = 24 * 3600.0
_LIBRARY_SECTIONS = ("libs", "oldlibs")
_DEB822, _ONE_LINE = "/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"
_updated_in_this_run: set[Path] = set()


@dataclass(frozen=True)
class Available:
    """One Debian version of a package in one suite, as a binary package or a source package."""

    package: str
    version: str
    suite: str
    source: bool


def archive_source(deb822: str, one_line: str = "") -> tuple[str, str | None]:
    """(URI, Signed-By) of the machine's main Debian archive (not security), else Debian's default."""
    for fields in parse_stanzas(deb822):
        if fields.get("Enabled", "yes").lower() == "no":
            continue
        for uri in fields.get("URIs", "").split():
            if "security" not in uri and uri.rstrip("/").endswith("/debian"):
                return uri.rstrip("/"), fields.get("Signed-By") or None
    for line in one_line.splitlines():
        found = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s", line.strip())
        if found and "security" not in found.group(1) and found.group(1).rstrip("/").endswith("/debian"):
            return found.group(1).rstrip("/"), None
    return DEFAULT_ARCHIVE, None


def parse_stanzas(text: str) -> list[dict[str, str]]:
    """RFC 822 style stanzas (apt-cache show, deb822 sources) as dicts; continuation lines are joined."""
    stanzas: list[dict[str, str]] = []
    for block in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = ""
        for line in block.splitlines():
            if line.startswith("#"):
                continue
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
        if fields:
            stanzas.append(fields)
    return stanzas


def parse_madison(text: str) -> list[Available]:
    """`apt-cache madison` lines: ' pgbouncer | 1.24.1-1+deb13u2 | http://... trixie/main amd64 Packages'."""
    found: list[Available] = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not parts[0] or not parts[1]:
            continue
        where = parts[2].split()
        if len(where) < 3:
            continue
        found.append(Available(parts[0], parts[1], where[1].split("/")[0], where[-1] == "Sources"))
    return found


def depends_groups(stanza: dict[str, str]) -> list[list[str]]:
    """Pre-Depends and Depends as alternatives of package names ('a (>= 1) | b:any' -> ['a', 'b'])."""
    groups: list[list[str]] = []
    for field in ("Pre-Depends", "Depends"):
        for item in stanza.get(field, "").replace("\n", " ").split(","):
            names = [re.split(r"[\s(:\[<]", alt.strip(), maxsplit=1)[0] for alt in item.split("|")]
            if any(names):
                groups.append([n for n in names if n])
    return groups


def upstream_of(debian_version: str) -> str:
    """The upstream part of a Debian version: '1:1.24.1-1+deb13u2' -> '1.24.1'."""
    text = debian_version.split(":", 1)[1] if re.match(r"^\d+:", debian_version) else debian_version
    return text.rsplit("-", 1)[0] if "-" in text else text


class DebianArchive:
    """apt-get/apt-cache over the suites in SUITES with lists and caches under `root`."""

    def __init__(self, root: Path, suites: Sequence[str] = SUITES) -> None:
        # Resolved: apt.conf names this folder, and a cache reached through a symlink must write the
        # same apt.conf (another text would force an `apt-get update` and point apt elsewhere).
        self.root, self.suites = root.resolve(), tuple(suites)
        self.lists = self.root / "lists"
        if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
            raise ProvisionError("apt-get/dpkg-deb not found (not a Debian-like system)")

    def available(self, package: str) -> list[Available]:
        """Every version of `package` in the suites, binary and source (lists refreshed if stale)."""
        with file_lock(self.root / "lock"):
            self._ensure_lists()
            return parse_madison(self._apt("apt-cache", "madison", package))

    def download_source(self, package: str, version: str, dest: Path) -> Path:
        """The upstream (orig) tarball of a source package version, downloaded into `dest`."""
        with file_lock(self.root / "lock"):
            self._apt("apt-get", "source", "--download-only", f"{package}={version}", cwd=dest, timeout=600)
        tarballs = sorted(dest.glob(f"{package}_*.orig.tar.*"))
        if not tarballs:
            raise ProvisionError(f"apt-get source {package}={version} gave no .orig tarball")
        return tarballs[0]

    def download_with_libraries(self, package: str, version: str, suite: str, dest: Path) -> list[Path]:
        """The .deb of `package`, plus the library packages (section libs) it needs, recursively."""
        with file_lock(self.root / "lock"):
            pins = self._library_closure(package, version, suite)
            log.info(f"downloading {package} {version} + {len(pins) - 1} libraries (Debian {suite}) ...")
            self._apt("apt-get", "download", *pins, cwd=dest, suite=suite, timeout=600)
        return sorted(dest.glob("*.deb"))

    def _library_closure(self, package: str, version: str, suite: str) -> list[str]:
        """name=version of the package and of every library it depends on, from that one suite."""
        top = self._show([f"{package}={version}"], suite)
        if package not in top:
            raise ProvisionError(f"Debian {suite} has no {package} {version}")
        chosen: dict[str, str] = {package: version}
        level = [top[package]]
        while level:
            groups = [g for stanza in level for g in depends_groups(stanza)]
            names = sorted({n for g in groups for n in g if n not in chosen})
            found = self._show(names, suite) if names else {}
            level = []
            for group in groups:
                if any(n in chosen for n in group):
                    continue
                pick = next((found[n] for n in group if n in found), None)
                if pick is not None and pick.get("Section", "").split("/")[-1] in _LIBRARY_SECTIONS:
                    chosen[pick["Package"]] = pick["Version"]
                    level.append(pick)
        return [f"{name}={ver}" for name, ver in chosen.items()]

    def _show(self, names: Iterable[str], suite: str) -> dict[str, dict[str, str]]:
        text = self._apt("apt-cache", "show", "--no-all-versions", *names, suite=suite)
        return {s["Package"]: s for s in parse_stanzas(text) if "Package" in s and "Version" in s}

    def _ensure_lists(self) -> None:
        """Write the private sources and apt.conf; run `apt-get update` when they changed or got old."""
        (self.lists / "partial").mkdir(parents=True, exist_ok=True)
        (self.root / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        uri, keyring = archive_source(_read(_DEB822), _read(_ONE_LINE))
        keyring = keyring or (DEFAULT_KEYRING if os.path.exists(DEFAULT_KEYRING) else None)
        option = f"[signed-by={keyring}] " if keyring else ""
        stamp = self.lists / "leakcheck-updated"
        changed = False
        lists = [("all", self.suites, ("deb", "deb-src"))] + [(s, (s,), ("deb",)) for s in self.suites]
        for name, suites, kinds in lists:
            text = "".join(f"{kind} {option}{uri} {suite} main\n" for suite in suites for kind in kinds)
            changed |= _write_if_changed(self.root / f"sources-{name}.list", text)
        changed |= _write_if_changed(self.root / "apt.conf", self._conf())
        (self.root / "status").touch()
        if changed:
            stamp.unlink(missing_ok=True)  # the lists were made for other sources: update before use
        try:
            age = time.time() - stamp.stat().st_mtime
        except OSError:
            age = float("inf")
        if self.lists in _updated_in_this_run or age <= LIST_MAX_AGE:
            return
        log.info(f"updating Debian package lists for {', '.join(self.suites)} in {self.lists} ...")
        _updated_in_this_run.add(self.lists)  # tried once per run, whatever the outcome
        try:
            self._apt("apt-get", "update", "--error-on=any", timeout=600)  # a failed fetch is an error
        except ProvisionError:
            if age == float("inf"):
                raise
            log.info("apt-get update failed; using the package lists from the last update")
            return
        stamp.touch()

    def _conf(self) -> str:
        return "".join(
            [
                "#clear APT::Update::Pre-Invoke;\n#clear APT::Update::Post-Invoke;\n",
                "#clear APT::Update::Post-Invoke-Success;\n",
                f'Dir::Etc::sourceparts "{self.root / "no-parts"}";\n',
                f'Dir::State::Lists "{self.lists}";\n',
                f'Dir::State::status "{self.root / "status"}";\n',  # empty: ignore what is installed
                f'Dir::Cache "{self.root / "cache"}";\n',
                'Dir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n',
            ]
        )

    def _apt(
        self, tool: str, *args: str, cwd: Path | None = None, suite: str = "all", timeout: int = 120
    ) -> str:
        argv = [
            tool,
            "-q",
            "-c",
            str(self.root / "apt.conf"),
            "-o",
            f"Dir::Etc::sourcelist={self.root / f'sources-{suite}.list'}",
        ]
        if os.geteuid() == 0 and cwd is not None:
            argv += ["-o", "APT::Sandbox::User=root"]  # downloads land in our private temp dir
        env = dict(os.environ, LC_ALL="C", DEBIAN_FRONTEND="noninteractive")
        try:
            done = children.run([*argv, *args], cwd=cwd, env=env, timeout=timeout)  # dies with us
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ProvisionError(f"{tool} {args[0]} failed: {exc}") from exc
        errors = [line[3:] for line in done.stderr.splitlines() if line.startswith("E: ")]
        if done.returncode != 0 or (errors and tool == "apt-get"):
            detail = errors[0] if errors else (done.stderr.strip().splitlines() or ["no message"])[-1]
            detail = " ".join(re.sub(r"\[IP: [^\]]*\]", "", detail).split())
            raise ProvisionError(f"{tool} {args[0]} failed: {detail}")
        return done.stdout


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def _write_if_changed(path: Path, text: str) -> bool:
    if _read(str(path)) == text:
        return False
    partial = path.with_name(path.name + ".new")
    partial.write_text(text)
    os.replace(partial, path)
    return True
