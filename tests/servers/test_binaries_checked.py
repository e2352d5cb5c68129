"""Every PgBouncer and PostgreSQL binary is checked by running it; bad ones are refused or rebuilt.

Real binaries only: the cached pgbouncer/postgres (copied into temp caches and damaged there),
/bin/true and /bin/bash as the wrong programs, and a tiny release-like tarball built here.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from leakcheck.cli import main as cli
from leakcheck.model.errors import LeakcheckError, UsageError
from leakcheck.model.versions import Version, parse_spec
from leakcheck.provision.base import Binary
from leakcheck.provision.host.system import cache_root, make_world_readable, server_user
from leakcheck.provision.pgbouncer.binaries import resolve_bouncer
from leakcheck.provision.postgres.binaries import PgInstall, cached_problem, resolve_pg
from leakcheck.provision.sources import banners
from leakcheck.provision.sources.program_cache import cached_binary as cached_program
from leakcheck.provision.sources.program_folder import check_program
from leakcheck.provision.sources.programs import PGBOUNCER

pytestmark = pytest.mark.servers


def cached_binary(folder: Path, version: Version) -> tuple[Binary | None, str]:
    """A cached pgbouncer folder's binary if it runs and reports that folder's version, else why not."""
    return cached_program(folder, version, PGBOUNCER)


def _bouncer(raw: str) -> tuple[str, ...]:
    return resolve_bouncer(parse_spec(raw, "--bouncer"), cache_root()).argv


def _pg(raw: str) -> PgInstall:
    return resolve_pg(parse_spec(raw, "--pg"), cache_root())


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temp folder other users can enter (pytest's tmp_path is private to its owner)."""
    folder = Path(tempfile.mkdtemp(prefix="leakcheck-test-"))
    folder.chmod(0o755)
    yield folder
    for dirpath, _dirs, _files in os.walk(folder):
        os.chmod(dirpath, 0o755)  # a test may have made it read-only
    shutil.rmtree(folder)


def _damage(program: Path, how: str) -> None:
    """A few bytes of damage, as a broken download or disk would leave."""
    data = program.read_bytes()
    program.chmod(0o755)
    if how == "header":
        program.write_bytes(b"\0\0\0\0" + data[4:])  # no ELF magic: the kernel refuses to run it
    else:
        program.write_bytes(data[: len(data) // 2])  # half a binary


def _copy_bouncer(store: Path, raw: str) -> Path:
    """The cached pgbouncer folder of `raw` copied into `store`; the copy's folder."""
    argv = _bouncer(raw)
    folder = next(p for p in map(Path, argv[-1:]) for p in p.parents if p.parent.name == "pgbouncer")
    copy = store / folder.name
    shutil.copytree(folder, copy, symlinks=True)
    return copy


def _copy_pg(cache: Path, raw: str, name: str = "") -> Path:
    """cache/postgres/<version>: a copy of the real bin/ with links to the real lib/ and share/."""
    install = _pg(raw)
    folder = cache / "postgres" / (name or str(install.version))
    shutil.copytree(install.bindir, folder / "bin")
    for part in ("lib", "share"):
        (folder / part).symlink_to(install.bindir.parent / part)
    return folder


@pytest.mark.parametrize("raw", ["1.18", "1.24", "1.26"])
def test_the_real_pgbouncers_print_pgbouncer_s_own_banner(raw: str) -> None:
    argv = _bouncer(raw)
    reply = check_program(argv)
    assert reply.version is not None and Version.parse(raw).matches(reply.version), reply


@pytest.mark.parametrize("wrong", ["/bin/true", "/bin/bash"])
def test_a_path_that_is_not_pgbouncer_is_refused_in_one_line(wrong: str) -> None:
    with pytest.raises(UsageError) as raised:
        resolve_bouncer(parse_spec(wrong, "--bouncer"), cache_root())
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"--bouncer={wrong} is not PgBouncer: `{wrong} --version` printed '")
    assert "give the path of a pgbouncer binary" in message


def test_a_pgbouncer_path_that_does_not_exist_is_refused_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "pgbouncer"
    with pytest.raises(UsageError, match=f"there is no file {missing}; give the path of a pgbouncer binary"):
        resolve_bouncer(parse_spec(str(missing), "--bouncer"), cache_root())


def test_a_path_that_is_not_postgres_is_refused_in_one_line() -> None:
    with pytest.raises(UsageError) as raised:
        resolve_pg(parse_spec("/bin/true", "--pg"), cache_root())
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("--pg=/bin/true is not PostgreSQL: `/bin/true --version` printed 'true (GNU coreutils)")


def test_leakcheck_prepare_with_bin_true_as_pgbouncer_exits_4_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bindir = _pg("16").bindir
    assert cli.main(["prepare", f"--pg={bindir}", "--bouncer=/bin/true"]) == 4
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("leakcheck: error: --bouncer=/bin/true is not PgBouncer: ")


@pytest.mark.parametrize("how", ["header", "truncated"])
def test_a_damaged_cached_pgbouncer_is_found_out(tmp_path: Path, how: str) -> None:
    folder = _copy_bouncer(tmp_path, "1.24")
    version = Version.parse(folder.name)
    assert cached_binary(folder, version)[0] is not None
    _damage(folder / "bin" / "pgbouncer", how)
    binary, why = cached_binary(folder, version)
    assert binary is None and why.startswith("does not run (`")


def test_a_damaged_library_of_the_extracted_debian_pgbouncer_is_found_out(tmp_path: Path) -> None:
    folder = _copy_bouncer(tmp_path, "1.26")
    libevent = next((folder / "root").glob("usr/lib/*/libevent-2.1.so.*.*"))
    _damage(libevent, "header")
    binary, why = cached_binary(folder, Version.parse(folder.name))
    assert binary is None and "exited with code 127" in why


@pytest.mark.parametrize("how", ["header", "truncated"])
def test_a_damaged_cached_postgres_is_found_out(tmp_path: Path, how: str) -> None:
    folder = _copy_pg(tmp_path, "16")
    version = Version.parse(folder.name)
    assert cached_problem(folder, version) == ""
    _damage(folder / "bin" / "postgres", how)
    assert cached_problem(folder, version).startswith("does not run: `")


def test_a_cached_postgres_of_another_version_than_its_folder_is_found_out(tmp_path: Path) -> None:
    folder = _copy_pg(tmp_path, "16", name="16.1")
    assert cached_problem(folder, Version((16, 1))).startswith("reports 16.")


def _release_like_tarball(folder: Path, version: str) -> Path:
    """pgbouncer-<version>.tar.gz whose configure/make/make install yields a pgbouncer printing the banner."""
    files = {
        "configure": '#!/bin/sh\nsed "s|@prefix@|${1#--prefix=}|" Makefile.in > Makefile\n',
        "Makefile.in": "all:\n\ttrue\ninstall:\n\tmkdir -p @prefix@/bin\n\tcp pgbouncer.sh @prefix@/bin/pgbouncer\n",
        "pgbouncer.sh": f"#!/bin/sh\necho 'PgBouncer {version}'\necho 'libevent 2.1.12-stable'\n",
    }
    tarball = folder / f"pgbouncer-{version}.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(f"pgbouncer-{version}/{name}")
            data = text.encode()
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return tarball


def _rebuilt(tmp_path: Path, version: str, monkeypatch: pytest.MonkeyPatch,
             caplog: pytest.LogCaptureFixture) -> tuple[Binary, list[str]]:
    """PgBouncer `version` resolved from tmp_path's cache (damaged by the caller), with a release-like
    tarball of it at hand to build; what was logged. Skipped where it cannot be built, or where an
    installed one would be used instead."""
    if shutil.which("cc") is None or shutil.which("make") is None:
        pytest.skip("building needs cc and make (scripts/bootstrap installs them)")
    installed = [p for p in (shutil.which("pgbouncer"), "/usr/sbin/pgbouncer") if p and os.access(p, os.X_OK)]
    if any(check_program([p]).version == Version.parse(version) for p in installed):
        pytest.skip(f"an installed pgbouncer {version} would be used instead of a rebuild")
    monkeypatch.setenv("LEAKCHECK_PGBOUNCER_TARBALLS", str(_release_like_tarball(tmp_path, version)))
    caplog.set_level(logging.INFO, logger="leakcheck")
    caplog.clear()
    binary = resolve_bouncer(parse_spec(version.rpartition(".")[0], "--bouncer"), tmp_path / "cache")
    return binary, caplog.messages


def test_a_damaged_cached_pgbouncer_is_rebuilt_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = tmp_path / "cache" / "pgbouncer"
    folder = _copy_bouncer(store, "1.24")
    _damage(folder / "bin" / "pgbouncer", "header")
    binary, said = _rebuilt(tmp_path, folder.name, monkeypatch, caplog)
    assert said[0].startswith(f"cached PgBouncer {folder.name} in {folder} does not run (`")
    assert said[0].endswith("; rebuilding it")
    assert any(line.startswith(f"building PgBouncer from pgbouncer-{folder.name}.tar.gz") for line in said)
    assert binary.argv == (str(folder / "bin" / "pgbouncer"),) and str(binary.version) == folder.name
    assert binary.origin.startswith("built from ")
    caplog.clear()
    reused = resolve_bouncer(parse_spec("1.24", "--bouncer"), store.parent)
    assert (reused.version, reused.argv) == (binary.version, binary.argv)
    assert caplog.messages == []  # it works now: used as it is, nothing rebuilt


def _as_server_user(action: Callable[[], str]) -> str:
    """`action` in a forked child that runs as the unprivileged server user (as root), else as we are."""
    user = server_user()
    if user.is_self:
        return action()
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root, run, report, exit without pytest's cleanup
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(user.gid)
            os.setuid(user.uid)
            result = json.dumps({"ok": action()})
        except BaseException as exc:  # reported to the parent, which fails the test
            result = json.dumps({"error": f"{type(exc).__name__}: {exc}"})
        os.write(writer, result.encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        outcome = json.loads(pipe.read() or '{"error": "the child reported nothing"}')
    os.waitpid(pid, 0)
    if "error" in outcome:
        raise AssertionError(outcome["error"])
    return str(outcome["ok"])


def test_a_read_only_cache_serves_what_it_holds_and_refuses_to_fill_in_one_line(
    shared_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = shared_tmp / "cache"
    (cache / "pgbouncer").mkdir(parents=True)
    folder = _copy_bouncer(cache / "pgbouncer", "1.24")
    _copy_pg(cache, "16")
    make_world_readable(cache)
    for dirpath, dirnames, filenames in os.walk(cache):
        for name in [*dirnames, *filenames, "."]:
            path = Path(dirpath, name)
            if not path.is_symlink():
                path.chmod(stat.S_IMODE(path.stat().st_mode) & ~0o222)
    monkeypatch.setenv("LEAKCHECK_CACHE", str(cache))

    def resolve(pg: str, bouncer: str) -> Callable[[], str]:
        def action() -> str:
            root = cache_root()
            try:
                pg_version = resolve_pg(parse_spec(pg, "--pg"), root).version
                return f"{pg_version} {resolve_bouncer(parse_spec(bouncer, '--bouncer'), root).version}"
            except LeakcheckError as exc:
                return f"error: {exc}"

        return action

    pg_version = _pg("16").version
    assert _as_server_user(resolve("16", "1.24")) == f"{pg_version} {folder.name}"
    refused = _as_server_user(resolve("16", "1.23.1"))
    assert refused.startswith("error: could not obtain PgBouncer 1.23.1: tried ") and "\n" not in refused
    assert f"building or fetching into {cache / 'pgbouncer'} (cannot write there: " in refused
    assert "Set LEAKCHECK_CACHE to a folder this user can write" in refused
    assert banners.ask([str(folder / "bin" / "pgbouncer")], banners.PGBOUNCER).version == Version.parse(folder.name)


def test_a_cache_path_that_is_a_file_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("")
    monkeypatch.setenv("LEAKCHECK_CACHE", str(not_a_folder))
    with pytest.raises(UsageError, match=f"^the leakcheck cache {not_a_folder} is not a folder: remove that file or "):
        cache_root()


def test_a_file_where_a_cached_pgbouncer_folder_belongs_is_replaced_by_the_build_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = tmp_path / "cache" / "pgbouncer"
    store.mkdir(parents=True)
    (store / "1.23.1").write_text("not a folder\n")  # a half-copied cache, a stray file
    binary, said = _rebuilt(tmp_path, "1.23.1", monkeypatch, caplog)
    assert str(binary.version) == "1.23.1" and binary.argv == (str(store / "1.23.1" / "bin" / "pgbouncer"),)
    assert said[0] == f"cached PgBouncer 1.23.1 in {store / '1.23.1'} is a file, not a folder; rebuilding it", said
