"""Outcomes rebuilt from test reports, their one order, and the --results file (pure, tmp_path)."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from leakcheck.model.errors import UsageError
from leakcheck.model.target import Route
from leakcheck.model.verdicts import Fact, Outcome, Verdict
from leakcheck.results import results
from leakcheck.results.gather import Gathered
from leakcheck.results.results import Results, Unmeasured
from tests.pure.outcomes import make

SEARCH_PATH = make(
    "search_path", "18.4", "1.24.1", Route.TRANSACTION, "asyncpg", Verdict.LEAKS, "B read 'a, public' [A on pid 1]",
    driver_version="0.32.0", settings=(("max_prepared_statements", "0"),),
    details=(("b_reported", '"$user", public'), ("b_server_value", "a, public"),
             ("b_reported_matches_server", "false")),
    facts=(Fact.LEAKED, Fact.MISREPORTED),
)
DIRECT = make("set_role", "16.14", "", Route.DIRECT, "psycopg", Verdict.ISOLATED, "e", security=True)


def outcome(probe: str, verdict: Verdict = Verdict.ISOLATED, pg: str = "16.14", bouncer: str = "1.24.1",
            driver: str = "psycopg", route: Route = Route.TRANSACTION) -> Outcome:
    return make(probe, pg, bouncer, route, driver, verdict, f"{probe} evidence")


def report(nodeid: str, when: str, props: list[tuple[str, str]], failed: bool = False,
           longrepr: str | None = None) -> pytest.TestReport:
    made = pytest.TestReport(nodeid, ("leakcheck", None, nodeid), {}, "failed" if failed else "passed",
                             longrepr, "call", user_properties=props)
    made.when = when  # type: ignore[assignment]  # xdist reports a crashed test with when="???"
    return made


# --- from test report properties ---------------------------------------------------------------


@pytest.mark.parametrize("original", [SEARCH_PATH, DIRECT, outcome("timezone", Verdict.ERROR)])
def test_an_outcome_comes_back_whole_from_its_report_properties(original: Outcome) -> None:
    assert results.from_properties(results.properties(original)) == original


def test_properties_sent_by_an_xdist_worker_as_lists_with_a_matrix_key_read_the_same() -> None:
    props = [[name, value] for name, value in results.properties(SEARCH_PATH)]
    props.append(["matrix_key", "pg18/pgbouncer1.24/asyncpg/search_path"])  # with --expect: not a detail
    assert results.from_properties(props) == SEARCH_PATH


def test_a_report_without_an_outcome_gives_none() -> None:
    assert results.from_properties([]) is None
    assert results.from_properties([("probe", "timezone")]) is None


def test_the_properties_are_the_documented_junit_ones() -> None:
    names = [name for name, _ in results.properties(SEARCH_PATH)]
    assert names == ["probe", "pg_version", "pooler", "pooler_kind", "pooler_version", "pooler_settings",
                     "pooler_config", "pooler_fleet", "bouncer_version", "route", "driver", "driver_version",
                     "driver_settings", "verdict", "evidence", "facts", "security", "b_reported", "b_server_value",
                     "b_reported_matches_server"]
    props = dict(results.properties(SEARCH_PATH))
    assert props["pooler"] == "pgbouncer1.24.1[max_prepared_statements=0]" and props["driver_version"] == "0.32.0"
    assert dict(results.properties(DIRECT))["bouncer_version"] == "-"
    assert dict(results.properties(DIRECT))["pooler"] == "-"
    assert dict(results.properties(DIRECT))["facts"] == "-"


# --- order and names ---------------------------------------------------------------------------


def test_the_order_does_not_depend_on_the_order_tests_finished_in() -> None:
    outcomes = [outcome(p, pg=pg, bouncer=b, driver=d) for pg in ("16.14", "9.6.24") for b in ("1.24.1", "1.18.0")
                for d in ("psycopg", "asyncpg") for p in ("timezone", "statement_timeout", "client_encoding")]
    outcomes += [outcome("timezone", bouncer="", route=Route.SHARED), outcome("timezone", route=Route.SESSION)]
    shuffled = outcomes[:]
    random.Random(8).shuffle(shuffled)
    ordered = results.canonical(shuffled)
    assert ordered == results.canonical(outcomes)
    assert [o.probe for o in ordered[:3]] == ["statement_timeout", "timezone", "client_encoding"]  # registry order
    first = ordered[0].pooler
    assert str(ordered[0].pg) == "9.6.24" and first is not None and str(first.version) == "1.18.0"  # as numbers
    assert [o.route for o in ordered[-2:]] == [Route.SHARED, Route.SESSION]


@pytest.mark.parametrize(
    ("given", "name"),
    [
        (outcome("timezone"), "test_leak[pg16.14-pgbouncer1.24.1-psycopg-timezone]"),
        (outcome("timezone", bouncer="", route=Route.DIRECT), "test_control[pg16.14-direct-psycopg-timezone]"),
        (outcome("timezone", route=Route.SESSION), "test_control[pg16.14-pgbouncer1.24.1-session-psycopg-timezone]"),
    ],
)
def test_an_outcome_is_named_as_its_generated_test(given: Outcome, name: str) -> None:
    assert results.name_of(given) == name


# --- the file ----------------------------------------------------------------------------------


def test_a_results_file_holds_every_field_and_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    lost = Unmeasured("leakcheck::test_leak[pg16.14-pgbouncer1.24.1-psycopg-timezone]", "worker 'gw0' crashed")
    results.save(path, Results((DIRECT, SEARCH_PATH), (lost,)))
    data = json.loads(path.read_text())
    assert (data["schema"], data["version"]) == ("leakcheck-results", 3)
    assert "Schema-qualify" in data["outcomes"][0].pop("advice")  # derived from the verdict and cell
    assert data["outcomes"][0] == {
        "probe": "search_path", "pg": "18.4",
        "pooler": {"kind": "pgbouncer", "version": "1.24.1", "settings": [["max_prepared_statements", "0"]],
                   "config": "", "label": "pgbouncer1.24.1[max_prepared_statements=0]"},
        "route": "transaction", "driver": "asyncpg", "driver_version": "0.32.0", "driver_settings": [],
        "verdict": "leaks", "facts": ["leaked", "misreported"], "security": False,
        "evidence": "B read 'a, public' [A on pid 1]",
        "details": {"b_reported": '"$user", public', "b_server_value": "a, public",
                    "b_reported_matches_server": "false"},
    }
    assert results.load(path) == Results((SEARCH_PATH, DIRECT), (lost,))  # canonical: leak tests first


def test_driver_settings_survive_the_results_file_and_the_test_report(tmp_path: Path) -> None:
    tuned = make("protocol_prepare", "16.14", "1.24.1", Route.TRANSACTION, "asyncpg", Verdict.NOT_APPLICABLE, "e",
                 driver_version="0.32.0", driver_settings=(("statement_cache_size", "0"),))
    path = tmp_path / "r.json"
    results.save(path, Results((tuned, outcome("protocol_prepare", driver="asyncpg"))))
    written = [o["driver_settings"] for o in json.loads(path.read_text())["outcomes"]]
    assert written == [[], [["statement_cache_size", "0"]]]  # the driver's defaults first
    assert results.load(path).outcomes[1] == tuned
    assert results.from_properties(results.properties(tuned)) == tuned
    assert dict(results.properties(tuned))["driver_settings"] == '[["statement_cache_size", "0"]]'


def test_a_version_2_file_reads_as_outcomes_with_the_drivers_defaults(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    results.save(path, Results((SEARCH_PATH,)))
    data = json.loads(path.read_text())
    data["version"] = 2
    del data["outcomes"][0]["driver_settings"]
    path.write_text(json.dumps(data))
    assert results.load(path).outcomes == (SEARCH_PATH,)


def test_a_version_1_file_reads_as_pgbouncer_outcomes_without_driver_versions(tmp_path: Path) -> None:
    path = tmp_path / "v1.json"
    path.write_text(json.dumps({"schema": "leakcheck-results", "version": 1, "outcomes": [
        {"probe": "timezone", "pg": "16.14", "bouncer": "1.24.1", "route": "transaction", "driver": "psycopg",
         "verdict": "isolated", "facts": [], "security": False, "evidence": "timezone evidence", "details": {}}]}))
    assert results.load(path).outcomes == (outcome("timezone"),)


def test_equal_runs_write_byte_identical_files(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    results.save(a, Results((DIRECT, SEARCH_PATH)))
    results.save(b, Results((SEARCH_PATH, DIRECT)))
    assert a.read_bytes() == b.read_bytes()


def test_a_gzip_results_file_reads_the_same_as_the_plain_one(tmp_path: Path) -> None:
    plain, packed = tmp_path / "r.json", tmp_path / "r.json.gz"
    results.save(plain, Results((DIRECT, SEARCH_PATH), (Unmeasured("test_leak[x]", "it failed"),)))
    packed.write_bytes(gzip.compress(plain.read_bytes(), mtime=0))
    assert results.load(packed) == results.load(plain)
    results.check_target(packed)  # an earlier run's gzip file may be replaced


def test_a_results_path_ending_in_gz_is_written_as_gzip_the_same_bytes_each_time(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    results.save(a, Results((DIRECT, SEARCH_PATH)))
    results.save(b, Results((SEARCH_PATH, DIRECT)))
    assert a.read_bytes() == b.read_bytes() and a.read_bytes()[:2] == b"\x1f\x8b"
    assert gzip.decompress(a.read_bytes()).decode() == results.dumps(Results((DIRECT, SEARCH_PATH)))
    assert set(results.load(a).outcomes) == {DIRECT, SEARCH_PATH}


def test_a_damaged_gzip_results_file_is_one_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "r.json.gz"
    path.write_bytes(gzip.compress(results.dumps(Results((DIRECT,))).encode())[:40])
    with pytest.raises(UsageError, match="r.json.gz is a damaged gzip file") as caught:
        results.load(path)
    assert "\n" not in str(caught.value)


def _one(**changed: object) -> str:
    """A version 3 file of one outcome, with `changed` fields (`pooler_...`: the pooler's)."""
    body = json.loads(results.dumps(Results((outcome("timezone"),))))
    entry = body["outcomes"][0]
    for name, value in changed.items():
        where, name = (entry["pooler"], name.removeprefix("pooler_")) if name.startswith("pooler_") else (entry, name)
        where[name] = value
    return json.dumps(body)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "is not JSON"),
        ("[]", "schema is 'list'"),
        ('{"format": 1, "verdicts": {}}', "schema is None"),  # a matrix file is not a results file
        ('{"schema": "leakcheck-results", "version": 5, "outcomes": []}', "is version 5 of leakcheck-results"),
        ('{"schema": "leakcheck-results", "version": 1, "outcomes": {}}', "outcomes and unmeasured must be lists"),
        ('{"schema": "leakcheck-results", "version": 1, "outcomes": [{"probe": "x"}]}', "a malformed entry"),
        ('{"schema": "leakcheck-results", "version": 1, "outcomes": [{"probe": "x", "pg": "16", "bouncer": "",'
         ' "route": "sideways", "driver": "psycopg", "verdict": "leaks", "facts": [], "security": false,'
         ' "evidence": ""}]}', "'sideways' is not a valid Route"),
        ('{"schema": "leakcheck-results", "version": true, "outcomes": []}', "is version true of"),
        ('{"schema": "leakcheck-results", "version": 3.0, "outcomes": []}', "is version 3.0 of"),
        (_one(pg="\u0661\u0666"), "is not a version number"),  # Arabic-Indic digits
        (_one(pooler_version="\uff11.24"), "is not a version number"),  # a full-width digit
        (_one(probe="time\nzone"), "a probe id is 'time\\nzone'"),
        (_one(driver=""), "a driver id is ''"),
        (_one(pooler_kind="pgpool", pooler_fleet=["4.5.1", "4.5.1"]), "only PgBouncer runs as a fleet"),
        (_one(pooler_fleet=["1.24.1"]), "a fleet is two processes or more"),
        (_one(pooler_version=None), "only a running pooler (dsn) has no version"),
    ],
)
def test_a_file_that_is_not_a_results_file_of_a_version_it_reads_is_one_line_naming_it(tmp_path: Path, content: str,
                                                                          message: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(UsageError, match="r.json") as caught:
        results.load(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_results_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        results.load(tmp_path / "missing.json")


def test_an_existing_file_that_is_not_a_results_file_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    with pytest.raises(UsageError, match="is not a leakcheck results file; move it away"):
        results.check_target(tmp_path / "pyproject.toml")
    results.save(tmp_path / "old.json", Results(()))
    results.check_target(tmp_path / "old.json")  # an earlier run's file may be replaced
    with pytest.raises(UsageError, match="is a folder"):
        results.check_target(tmp_path)


def test_an_interrupted_run_writes_no_results_file(tmp_path: Path) -> None:
    lines, ok = results.finish(tmp_path / "r.json", Results((DIRECT,)), "the run was interrupted")
    assert ok and lines == [f"{tmp_path / 'r.json'} not written: the run was interrupted"]
    assert list(tmp_path.iterdir()) == []


# --- several files as one ----------------------------------------------------------------------


def test_an_outcome_two_jobs_measured_alike_is_kept_once() -> None:
    shared = outcome("timezone", bouncer="", route=Route.SHARED)
    first = Results((outcome("timezone", bouncer="1.24.1"), shared))
    second = Results((outcome("timezone", bouncer="1.26.1"), Outcome(**{**shared.__dict__, "evidence": "other pid"})))
    merged = results.combine([("a.json", first), ("b.json", second)])
    assert [(o.route, str(o.pooler.version if o.pooler else "")) for o in merged.outcomes] == [
        (Route.TRANSACTION, "1.24.1"), (Route.TRANSACTION, "1.26.1"), (Route.SHARED, "")]


def test_two_files_that_disagree_on_one_outcome_are_refused_naming_both() -> None:
    with pytest.raises(UsageError) as caught:
        results.combine([("a.json", Results((outcome("timezone"),))),
                         ("b.json", Results((outcome("timezone", Verdict.LEAKS),)))])
    message = str(caught.value)
    assert "a.json and b.json disagree on test_leak[pg16.14-pgbouncer1.24.1-psycopg-timezone]" in message
    assert "isolated and leaks" in message


# --- gathered from test reports ----------------------------------------------------------------


def test_the_outcomes_are_gathered_from_call_reports_once_each() -> None:
    gathered = Gathered()
    node = "leakcheck::test_leak[pg18.4-pgbouncer1.24.1-asyncpg-search_path]"
    props = results.properties(SEARCH_PATH)
    gathered.pytest_runtest_logreport(report(node, "setup", []))
    gathered.pytest_runtest_logreport(report(node, "call", props, failed=True, longrepr="LEAKS: ..."))
    gathered.pytest_runtest_logreport(report(node, "teardown", props))
    gathered.pytest_runtest_logreport(report("tests/pure/test_x.py::test_y", "call", props))  # not a leak test
    assert gathered.outcomes == [SEARCH_PATH] and gathered.unmeasured == []


def test_a_leak_test_that_failed_without_an_outcome_is_unmeasured() -> None:
    gathered = Gathered()
    node = "leakcheck::test_leak[pg16.14-pgbouncer1.24.1-psycopg-timezone]"
    gathered.pytest_runtest_logreport(
        report(node, "???", [], failed=True, longrepr="worker 'gw0' crashed while running 'leakcheck::...'"))
    assert gathered.results() == Results((), (Unmeasured(node, "worker 'gw0' crashed while running 'leakcheck::...'"),))
