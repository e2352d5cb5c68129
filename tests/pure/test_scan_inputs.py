"""scan's inputs: each kind found from its content, read as a stream, and what each reader makes of it."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import pytest

from leakcheck.model.errors import UsageError
from leakcheck.scan.classify import Classifier
from leakcheck.scan.inputs import Ended, Kind, Sent, copy_unescape, detect, message_statement, read
from leakcheck.scan.workload import Workload

STDERR = """\
2026-12-01 10:00:00.001 UTC [101] LOG:  connection authorized: user=app database=app
2026-12-01 10:00:00.002 UTC [101] LOG:  statement: SET statement_timeout = 5000
2026-12-01 10:00:00.003 UTC [101] LOG:  statement: BEGIN
2026-12-01 10:00:00.004 UTC [101] LOG:  statement: COPY t FROM STDIN
2026-12-01 10:00:00.005 UTC [101] LOG:  statement: COMMIT
2026-12-01 10:00:00.006 UTC [102] LOG:  execute S_1: SELECT pg_advisory_lock($1)
2026-12-01 10:00:00.006 UTC [102] DETAIL:  parameters: $1 = '42'
2026-12-01 10:00:00.007 UTC [102] LOG:  statement: SELECT a,
\tb FROM t
\tWHERE c = 'x'
2026-12-01 10:00:00.008 UTC [102] LOG:  statement: COPY t TO STDOUT
2026-12-01 10:00:00.009 UTC [103] LOG:  duration: 0.100 ms  statement: SET search_path = app
2026-12-01 10:00:00.010 UTC [103] LOG:  duration: 0.050 ms
2026-12-01 10:00:00.011 UTC [103] LOG:  duration: 0.020 ms  parse <unnamed>: SELECT 1
2026-12-01 10:00:00.012 UTC [103] LOG:  execute <unnamed>: SELECT 1
2026-12-01 10:00:00.013 UTC [103] ERROR:  syntax error at or near "SELEC"
2026-12-01 10:00:00.013 UTC [103] STATEMENT:  SELEC 1
2026-12-01 10:00:00.014 UTC [101] LOG:  disconnection: session time: 0:00:01.000 user=app database=app
"""

CSVLOG = (
    '2026-12-01 10:00:00.001 UTC,"app","app",201,"127.0.0.1:5000",6751a2b3.c9,1,"SET",2026-12-01 10:00:00 UTC,'
    '3/1,0,LOG,00000,"statement: SET application_name = \'x\'",,,,,,,,,"psql","client backend",,0\n'
    '2026-12-01 10:00:00.002 UTC,"app","app",201,"127.0.0.1:5000",6751a2b3.c9,2,"SELECT",2026-12-01 10:00:00 UTC,'
    '3/2,0,LOG,00000,"statement: SELECT lastval(),\n  1",,,,,,,,,"psql","client backend",,0\n'
    '2026-12-01 10:00:00.003 UTC,"app","app",201,"127.0.0.1:5000",6751a2b3.c9,3,"idle",2026-12-01 10:00:00 UTC,'
    '3/3,0,ERROR,42601,"syntax error",,,,,,"SELEC 1",,,"psql","client backend",,0\n'
)


def _jsonlog_line(message: str, severity: str = "LOG", pid: int = 301) -> str:
    return json.dumps({"timestamp": "2026-12-01 10:00:00.001 UTC", "user": "app", "dbname": "app", "pid": pid,
                       "session_id": f"6751a2b3.{pid:x}", "error_severity": severity, "message": message,
                       "backend_type": "client backend", "query_id": 0}) + "\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _sent(path: Path) -> list[Sent | Ended]:
    return list(read(path, detect(path)))


def test_a_stderr_log_gives_each_logged_statement_with_its_line_session_and_prepared_name(tmp_path: Path) -> None:
    path = _write(tmp_path, "postgresql.log", STDERR)
    assert detect(path) is Kind.STDERR
    got = _sent(path)
    sent = [e for e in got if isinstance(e, Sent)]
    assert [s.text for s in sent] == ["SET statement_timeout = 5000", "BEGIN", "COPY t FROM STDIN", "COMMIT",
                                      "SELECT pg_advisory_lock($1)", "SELECT a,\nb FROM t\nWHERE c = 'x'",
                                      "COPY t TO STDOUT", "SET search_path = app", "SELECT 1"]
    assert sent[0].where == f"{path}:2" and sent[0].session == "101"
    assert sent[4].prepared == "S_1" and sent[8].prepared is None  # <unnamed>
    assert sent[5].where == f"{path}:8"  # a statement continued on tab-led lines starts where it began
    assert got[0] == Ended("101") and got[-1] == Ended("101")  # connection authorized, disconnection


@pytest.mark.parametrize(("prefix", "session"), [
    ("2026-12-01 10:00:00 UTC [4242] app@db ", "4242"),  # Debian's %m [%p] %q%u@%d
    ("1733400000.123 6751a2b3.1092 ", "6751a2b3.1092"),  # %n (an epoch, not a session id) then %c
    ("2026-12-01 10:00:00.123 UTC ", None),  # neither: statements without a session
])
def test_a_log_line_prefix_names_the_session_by_its_session_id_else_its_pid(tmp_path: Path, prefix: str,
                                                                           session: str | None) -> None:
    path = _write(tmp_path, "p.log", f"{prefix}LOG:  statement: SELECT 1\n{prefix}LOG:  statement: SELECT 2\n")
    assert [e.session for e in _sent(path) if isinstance(e, Sent)] == [session, session]


@pytest.mark.parametrize(("message", "said"), [
    ("statement: SET x = 1", ("SET x = 1", None)),
    ("execute S_3: SELECT 1", ("SELECT 1", "S_3")),
    ("execute S_3/C_4: SELECT 1", ("SELECT 1", "S_3")),
    ("execute fetch from S_3/C_4: SELECT 1", None),
    ("duration: 1.5 ms  execute <unnamed>: SELECT 2", ("SELECT 2", None)),
    ("duration: 1.5 ms  bind S_1: SELECT 2", None),
    ("duration: 1.5 ms", None),
    ("checkpoint starting: time", None),
])
def test_a_log_message_gives_the_statement_it_records(message: str, said: tuple[str, str | None] | None) -> None:
    assert message_statement(message) == said


def test_a_csvlog_gives_its_log_statements_with_the_session_id(tmp_path: Path) -> None:
    path = _write(tmp_path, "postgresql.csv", CSVLOG)
    assert detect(path) is Kind.CSVLOG
    sent = [e for e in _sent(path) if isinstance(e, Sent)]
    assert [(s.text, s.session, s.where) for s in sent] == [
        ("SET application_name = 'x'", "6751a2b3.c9", f"{path}:1"),
        ("SELECT lastval(),\n  1", "6751a2b3.c9", f"{path}:2")]


def test_a_jsonlog_gives_its_log_statements(tmp_path: Path) -> None:
    path = _write(tmp_path, "postgresql.json", _jsonlog_line("statement: LISTEN jobs")
                  + _jsonlog_line("duration: 0.1 ms  execute a1: SELECT 1") + _jsonlog_line("oops", "ERROR"))
    assert detect(path) is Kind.JSONLOG
    sent = [e for e in _sent(path) if isinstance(e, Sent)]
    assert [(s.text, s.prepared, s.session) for s in sent] == [("LISTEN jobs", None, "6751a2b3.12d"),
                                                               ("SELECT 1", "a1", "6751a2b3.12d")]


def test_a_pg_stat_statements_csv_export_gives_each_query_with_its_calls_and_queryid(tmp_path: Path) -> None:
    path = _write(tmp_path, "pgss.csv", 'queryid,calls,query\n-42,7,"SELECT set_config($1, $2, $3)"\n'
                  '43,2,"SELECT a,\n b FROM t"\n')
    assert detect(path) is Kind.PGSS_CSV
    sent = [e for e in _sent(path) if isinstance(e, Sent)]
    assert [(s.text, s.calls, s.where) for s in sent] == [("SELECT set_config($1, $2, $3)", 7, f"{path}: queryid -42"),
                                                          ("SELECT a,\n b FROM t", 2, f"{path}: queryid 43")]


def test_a_json_export_is_read_as_lines_as_copy_wrote_them_and_as_one_array(tmp_path: Path) -> None:
    rows = [{"queryid": 1, "calls": 3, "query": "SET work_mem = $1"},
            {"queryid": 2, "calls": 1, "query": "SELECT 'a\\b',\n 1"}]
    lines = _write(tmp_path, "lines.json", "".join(json.dumps(r) + "\n" for r in rows))
    # COPY's text format doubles every backslash of row_to_json's output
    copied = _write(tmp_path, "copied.json", "".join(json.dumps(r).replace("\\", "\\\\") + "\n" for r in rows))
    array = _write(tmp_path, "array.json", json.dumps(rows))
    for path in (lines, copied, array):
        assert detect(path) is Kind.PGSS_JSON
        sent = [e for e in _sent(path) if isinstance(e, Sent)]
        assert [(s.text, s.calls) for s in sent] == [("SET work_mem = $1", 3), ("SELECT 'a\\b',\n 1", 1)], path


def test_copy_text_escapes_are_undone() -> None:
    assert copy_unescape(r"a\\b\nc\tq\101\x42") == "a\\b\nc\tqAB"


def test_a_folder_of_sql_files_gives_each_statement_with_its_file_and_line(tmp_path: Path) -> None:
    migrations = tmp_path / "db" / "migrate"
    migrations.mkdir(parents=True)
    (migrations / "002_b.sql").write_text("SELECT 1;\n\n-- é\nSET search_path = app;\n")
    (migrations / "001_a.sql").write_text("CREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql;\n"
                                          "SELECT pg_advisory_lock(1);\nTHIS IS NOT SQL;\nLISTEN x;\n")
    (migrations / "notes.txt").write_text("SET nothing = 1;")
    assert detect(tmp_path / "db") is Kind.SQL
    sent = [e for e in _sent(tmp_path / "db") if isinstance(e, Sent)]
    assert [(s.text, s.where.removeprefix(str(migrations) + "/")) for s in sent] == [
        ("CREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql", "001_a.sql:1"),
        ("SELECT pg_advisory_lock(1)", "001_a.sql:2"), ("THIS IS NOT SQL", "001_a.sql:3"), ("LISTEN x", "001_a.sql:4"),
        ("SELECT 1", "002_b.sql:1"), ("SET search_path = app", "002_b.sql:4")]


def test_a_single_sql_file_is_sql_by_its_content(tmp_path: Path) -> None:
    assert detect(_write(tmp_path, "dump", "SET statement_timeout = 0;\nSELECT 1;\n")) is Kind.SQL


def test_a_gzip_log_is_read_through_gzip(tmp_path: Path) -> None:
    path = tmp_path / "postgresql.log.gz"
    path.write_bytes(gzip.compress(STDERR.encode()))
    assert detect(path) is Kind.STDERR
    assert sum(isinstance(e, Sent) for e in _sent(path)) == 9


def test_a_truncated_gzip_log_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "postgresql.log.gz"
    path.write_bytes(gzip.compress((STDERR * 2000).encode())[:-2000])
    with pytest.raises(UsageError, match=r"reading .*postgresql.log.gz failed \(.*\); give the whole file"):
        list(read(path, detect(path)))


@pytest.mark.parametrize(("name", "text", "said"), [
    ("empty.log", "", "is empty"),
    ("notes.txt", "hello there, this is prose\n", "is not a PostgreSQL log"),
    ("x.json", '{"a": 1}\n', "is JSON but neither a jsonlog entry"),
])
def test_an_input_of_no_kind_is_one_line(tmp_path: Path, name: str, text: str, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        detect(_write(tmp_path, name, text))


@pytest.mark.parametrize(("name", "text", "said"), [
    ("bad.json", '{"query": "SELECT 1"}\n{"query": \n', r"bad.json:2 is not a JSON object"),
    ("bad.csv", 'queryid,query\n1,SELECT 1\n2\n', r"bad.csv:3 has 1 fields, its header 2"),
    ("bad-log.json", _jsonlog_line("statement: SELECT 1") + "[1]\n", r"bad-log.json:2 is not a jsonlog entry"),
    ("array.json", '[{"query": "SELECT 1"}, {"query": ', r"object 2 of its JSON array is not JSON"),
])
def test_a_structured_input_that_breaks_its_format_is_one_line_naming_the_line(tmp_path: Path, name: str, text: str,
                                                                              said: str) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(UsageError, match=said):
        list(read(path, detect(path)))


def test_a_big_log_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """A log of ~10 MB (5,000 statements of 2 KB over 3 lines each, 500 sessions) is counted with a peak of
    Python memory far below its size: the readers stream, the classifier's caches and the workload's lists
    are bounded (their bounds lowered here so that the test sees them at work)."""
    path = tmp_path / "big.log"
    values = ", ".join(f"'value-{n:04d}'" for n in range(140))
    with path.open("w") as out:
        for i in range(5_000):
            text = (f"SET statement_timeout = {i}" if i % 50 == 0 else
                    f"SELECT id, name,\n\temail FROM users\n\tWHERE id = {i} AND tenant IN ({values})")
            out.write(f"2026-12-01 10:00:00.{i % 1000:03d} UTC [{1000 + i % 500}] LOG:  statement: {text}\n")
    size = path.stat().st_size
    assert size > 10_000_000
    workload = Workload(_classify=Classifier(cache=100))
    tracemalloc.start()
    try:
        workload.read(str(path), "stderr", read(path, detect(path)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert workload.statements == 5_000
    assert sum(f.count for f in workload.found.values()) == 100
    assert peak < size / 10, f"peak {peak} bytes reading a {size} byte log"


def test_a_reader_gives_its_first_statement_before_it_reads_the_rest(tmp_path: Path) -> None:
    """Streaming by design: the first statement comes out while the file is still being read (here, a
    stream that fails if asked for more than its first lines before the first statement is taken)."""
    import io

    from leakcheck.scan.inputs import _stderr

    class Endless(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.lines = 0

        def __iter__(self) -> Endless:
            return self

        def __next__(self) -> str:
            self.lines += 1
            return f"2026-12-01 10:00:00 UTC [1] LOG:  statement: SELECT {self.lines}\n"

    stream = Endless()
    entries = _stderr(stream, "endless")
    first = next(entries)
    assert isinstance(first, Sent) and first.text == "SELECT 1" and stream.lines == 2
