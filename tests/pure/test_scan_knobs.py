"""`leakcheck scan --repo=DIR`: a repository's pooler knobs, read from sample repositories, as driver-set axes."""

from __future__ import annotations

from pathlib import Path

import pytest

from leakcheck.cli.main import main
from leakcheck.scan.knobs import Axis, axes, proposal, scan_repo


def _repo(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


RAILS = {
    "config/database.yml": """\
default: &default
  adapter: postgresql
  pool: <%= ENV.fetch("RAILS_MAX_THREADS") { 5 } %>
<% if ENV["PGBOUNCER"] %>
  prepared_statements: false
<% end %>
development:
  <<: *default
  database: app_dev
production:
  <<: *default
  url: <%= ENV["DATABASE_URL"] %>
  advisory_locks: false
""",
    ".env.production": "DATABASE_URL=postgres://app@pgbouncer:6432/app?prepared_statements=false\n",
    "node_modules/pg/README.md": "ignored",
}
DJANGO = {
    "mysite/settings.py": """\
import os
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "app",
        "CONN_MAX_AGE": 600,
        "DISABLE_SERVER_SIDE_CURSORS": True,
        "OPTIONS": {"prepare_threshold": None},
    },
    "replica": {"ENGINE": "django.db.backends.postgresql",
                "DISABLE_SERVER_SIDE_CURSORS": os.environ.get("NO_CURSORS") == "1"},
}
""",
    "worker/db.py": "import asyncpg\npool = asyncpg.create_pool(dsn, statement_cache_size=0)\n",
    "tools/names.py": 'DRIVER_OF = {"CONN_MAX_AGE": "django", "prepare_threshold": "psycopg"}\n',  # not settings
}
PRISMA = {
    "prisma/schema.prisma": 'datasource db {\n  provider = "postgresql"\n  url = env("DATABASE_URL")\n}\n',
    ".env": 'DATABASE_URL="postgresql://app:secret@pgbouncer:6432/app?pgbouncer=true&connection_limit=1"\n'
            'DIRECT_URL="postgresql://app:secret@db:5432/app"\n',
    "src/db.ts": "import postgres from 'postgres'\nexport const sql = postgres(url, { prepare: false })\n",
}
SPRING = {
    "src/main/resources/application.yml": """\
spring:
  datasource:
    url: jdbc:postgresql://pgbouncer:6432/app?prepareThreshold=0&ApplicationName=orders
    hikari:
      data-source-properties:
        prepareThreshold: 0
""",
    "src/main/resources/application-prod.properties":
        "spring.datasource.hikari.data-source-properties.prepareThreshold=0\n",
    "src/main/java/App.java": "class App {}\n",
}


def test_a_rails_repository_proposes_activerecords_prepared_statements_and_advisory_locks(tmp_path: Path) -> None:
    found = scan_repo(_repo(tmp_path, RAILS))
    assert {(k.where, k.driver, k.setting, k.value) for k in found} == {
        ("config/database.yml:5", "activerecord", "prepared_statements", "false"),
        ("config/database.yml:13", "activerecord", "advisory_locks", "false"),
        (".env.production:1", "activerecord", "prepared_statements", "false")}
    assert axes(found) == [Axis("activerecord", "prepared_statements", ("false", "true")),
                           Axis("activerecord", "advisory_locks", ("false", "true"))]


def test_a_django_repository_proposes_its_cursor_and_connection_settings(tmp_path: Path) -> None:
    found = axes(scan_repo(_repo(tmp_path, DJANGO)))
    assert found == [Axis("django", "CONN_MAX_AGE", ("600", "0")),
                     Axis("django", "DISABLE_SERVER_SIDE_CURSORS", ("true", "false")),  # the computed one adds none
                     Axis("psycopg", "prepare_threshold", ("None", "5")),
                     Axis("asyncpg", "statement_cache_size", ("0", "100"))]
    assert [a.runnable for a in found] == [True, True, True, True]  # django ships as an agent (issue 28)


def test_a_prisma_repository_proposes_pgbouncer_true_beside_its_default(tmp_path: Path) -> None:
    found = scan_repo(_repo(tmp_path, PRISMA))
    assert axes(found) == [Axis("prisma", "pgbouncer", ("true", "false")),
                           Axis("postgres-js", "prepare", ("false", "true"))]
    assert [k.where for k in found] == [".env:1", "src/db.ts:2"]


def test_a_spring_repository_proposes_prepare_threshold_for_pgjdbc_and_hibernate(tmp_path: Path) -> None:
    found = axes(scan_repo(_repo(tmp_path, SPRING)))
    assert found == [Axis("pgjdbc", "prepareThreshold", ("0", "5")), Axis("hibernate", "prepareThreshold", ("0", "5"))]
    lines = proposal(scan_repo(tmp_path))
    assert ("  leakcheck run --pg=16,17,18 --bouncer=1.18,1.24,1.26 --drivers=pgjdbc,hibernate "
            "--driver-set pgjdbc:prepareThreshold=0,5 --driver-set hibernate:prepareThreshold=0,5") in lines
    assert not any(line.startswith(("not runnable", "runnable now")) for line in lines)  # hibernate ships too


def test_php_and_go_knobs_are_read_from_their_code(tmp_path: Path) -> None:
    found = axes(scan_repo(_repo(tmp_path, {
        "config/database.php": "'options' => [PDO::ATTR_EMULATE_PREPARES => true],\n",
        "db/pool.go": "cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol\n",
    })))
    assert found == [Axis("pdo", "ATTR_EMULATE_PREPARES", ("true", "false")),
                     Axis("pgx-v5", "default_query_exec_mode", ("simple_protocol", "cache_statement"))]


def test_text_that_only_looks_like_a_url_sets_nothing(tmp_path: Path) -> None:
    assert scan_repo(_repo(tmp_path, {"t.py": 'bad = "postgresql://[::1/db?pgbouncer=true"\n'})) == []


def test_a_link_out_of_the_repository_is_not_followed(tmp_path: Path) -> None:
    outside = _repo(tmp_path / "outside", {"database.yml": "production:\n  prepared_statements: false\n"})
    repo = tmp_path / "repo"
    (repo / "config").mkdir(parents=True)
    (repo / "config" / "database.yml").symlink_to(outside / "database.yml")
    (repo / "linked").symlink_to(outside, target_is_directory=True)
    assert scan_repo(repo) == []


def test_scan_repo_prints_the_knobs_and_the_matrix_and_exits_0(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", f"--repo={_repo(tmp_path, PRISMA)}"]) == 0
    out = capsys.readouterr().out
    assert "2 pooler-relevant knobs:" in out and ".env:1: prisma pgbouncer=true" in out
    assert "--drivers=prisma,postgres-js --driver-set prisma:pgbouncer=true,false" in out


def test_a_repository_without_knobs_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", f"--repo={_repo(tmp_path, {'README.md': 'hi'})}"]) == 0
    assert "no pooler-relevant knob found" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "said"), [
    (["--repo=/nonexistent/repo"], "is not a folder"),
    (["--repo=REPO", "LOG"], "give one or the other"),
    (["--repo=REPO", "--run", "--pg=sixteen"], "--pg"),
    (["--repo=REPO", "--run", "--pg=16", "--bouncer=1.26"], "sets no knob of a driver this leakcheck ships"),
])
def test_bad_repo_input_is_one_line_and_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                               said: str) -> None:
    repo = _repo(tmp_path / "r", {".env": "DATABASE_URL=postgresql://u@h/db\n"})  # no knob at all
    (tmp_path / "x.log").write_text("2026-12-01 10:00:00 UTC [1] LOG:  statement: SELECT 1\n")
    argv = [a.replace("REPO", str(repo)).replace("LOG", str(tmp_path / "x.log")) for a in argv]
    capsys.readouterr()
    assert main(["scan", *argv]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err


def test_probes_go_with_repo_run_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "x.log"
    log.write_text("2026-12-01 10:00:00 UTC [1] LOG:  statement: SELECT 1\n")
    assert main(["scan", "--pg=16", "--probes=timezone", str(log)]) == 4
    assert "--probes goes with --repo --run" in capsys.readouterr().err
