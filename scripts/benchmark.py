#!/usr/bin/env python3
"""Timings for leakcheck (performance lives here, not in timed tests).

    python scripts/benchmark.py                  # warm: the matrix's probe runs a second, and the floor
    python scripts/benchmark.py --cold           # also the first run on an empty cache (fetch + build)
    python scripts/benchmark.py --pg 16 --bouncer 1.24
    python scripts/benchmark.py --merge-only         # only `leakcheck merge` of many outcomes (no server)
    python scripts/benchmark.py --no-merge           # skip the merge phase
    python scripts/benchmark.py --drivers            # also every shipped driver, each after a psycopg matrix
    python scripts/benchmark.py --drivers=sqlx,pgx-v5   # also these drivers, each paired with psycopg's
    python scripts/benchmark.py --drivers=hibernate --driver-rounds 3   # three pairs: the median ratio
    python scripts/benchmark.py --rounds 5           # five matrix-then-floor rounds (default 3): the median
    python scripts/benchmark.py --scan-only          # only `leakcheck scan` of a generated log (no server)
    python scripts/benchmark.py --scan-only --scan-mb 2000   # ... of a 2 GB log

With --drivers, each driver's matrix runs right after one of psycopg's, in pairs (agents are started
once per lane and client slot and reused, so a JVM is not started per probe), --driver-rounds times
(default 1): each pair gives the driver's ratio to psycopg's runs a second, and the median pair is the
figure, given with every pair's ratio and the ratio to the floor as a Markdown table. A single matrix
moves by 10-25% with the machine's other work (30-48 s for the same default matrix within half an hour,
on an otherwise idle machine), so one pair says little: --driver-rounds 3 for a figure to act on.

The matrix and then its floor are measured in rounds (--rounds, 3 by default), and the median round's
ratio is the figure: another job on the machine moves one round's matrix or floor by 10-25%.
The floor is measured in the same run on the same machine: the same number of runs, each two
direct PostgreSQL connections sending as many statements as a probe does on average, with no
harness, as many at a time as leakcheck runs lanes. "ratio" = the matrix's runs a second over
the floor's, so the number compares across machines. The merge phase times `leakcheck merge` (every
output file) of N and 4N synthetic outcomes, each over a floor of the same run: reading and writing
the same results file as JSON. A merge linear in its outcomes keeps its ratio as N grows.
The warm matrix runs with LEAKCHECK_TIMINGS on and prints where its time went (phase_table).
The scan phase (--scan-only, or --scan) times `leakcheck scan` (its own process, every report written)
of a generated stderr log of --scan-mb MB (default 200), an application's mix (scan_log), over a floor
of the same file: Python reading it line by line in its own process. It prints statements a second, the
ratio of the floor's seconds to the scan's, and the scan's peak memory (its process's max RSS).
Prints one line per measurement; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg

from leakcheck.cli import merge
from leakcheck.drivers.agents.catalogue import CATALOGUE
from leakcheck.model.target import Driver, Pooler, PoolerKind, Route, Target
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.model.versions import Version, parse_spec
from leakcheck.probes import PROBES
from leakcheck.provision.native import NativeBackend
from leakcheck.provision.postgres.fixtures import APP_ROLE
from leakcheck.results import results
from leakcheck.run.lanes import default_jobs

#: Statements a probe sends, both clients together, on average (proofs and transaction blocks included).
STATEMENTS_PER_RUN = 14


def matrix(pg: str, bouncer: str, cache: str | None, drivers: str = "",
           phases: dict[str, float] | None = None) -> tuple[int, float]:
    """Probe runs and seconds of `pytest --pg --bouncer` from an empty folder (controls included);
    `phases`, when given, gets where they went (leakcheck/provision/host/timing.py, on for this run)."""
    env = dict(os.environ)
    if cache is not None:
        env["LEAKCHECK_CACHE"] = cache
    with tempfile.TemporaryDirectory() as empty:
        timings = os.path.join(empty, "timings.json")
        if phases is not None:
            env["LEAKCHECK_TIMINGS"] = timings
        # as the README's main command is typed: from an empty folder, naming no path (a matrix-only run)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--rootdir={empty}",
               f"--pg={pg}", f"--bouncer={bouncer}", *([f"--drivers={drivers}"] if drivers else [])]
        launched, start = time.time(), time.perf_counter()
        done = subprocess.run(cmd, env=env, cwd=empty, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - start
        if phases is not None and os.path.exists(timings):
            with open(timings, encoding="utf-8") as f:
                phases.update(phase_table(json.load(f), launched, launched + seconds))
    last = done.stdout.splitlines()[-1] if done.stdout else ""  # every probe run counts, not applicable included
    counts = re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)\b", last)
    return sum(int(n) for n, _ in counts), seconds


def phase_table(data: dict[str, Any], launched: float, ended: float) -> dict[str, float]:
    """Wall seconds per phase: start-up (interpreter, imports, collection, until the lanes start), servers
    (every lane's servers, started up front), probes (until the last lane is done), catch-up (pytest's
    main thread reporting the tests whose outcomes are in), after (the session's end: writing the
    files, the terminal matrix, and teardown, which is stopping the servers). Inside the probes,
    lane-seconds summed over the lanes that ran at once: resets (fresh server connections per probe),
    connects, statements, and the harness's own work between them (setup, proofs, classifying, threads
    waiting for the GIL)."""
    phases = {k: float(v[0]) for k, v in data["phases"].items()}
    marks = data["marks"]
    start = marks.get("lanes start", ended)
    done = marks.get("lanes done", start)
    finish = marks.get("session finish", done)
    servers = phases.get("servers", 0.0)
    lane = phases.get("probe runs", 0.0)
    inside = {k: phases.get(k, 0.0) for k in ("resets", "connects", "statements")}
    counts = {f"{k} per run": data["phases"].get(k, [0, 0])[1] / max(1, data["phases"].get("probe runs", [0, 1])[1])
              for k in ("connects", "statements")}
    starts = data["phases"].get("agent starts", [0.0, 0])  # inside the connects (drivers/agents/client.py)
    each = {k: v for k, v in phases.items() if k.startswith("probe ") and k != "probe runs"}  # each probe (lanes.py)
    return {"start-up": start - launched, "servers": servers, "probes": done - start - servers,
            "catch-up": finish - done, "after": ended - finish, "teardown": phases.get("teardown", 0.0),
            "lane-seconds": lane, **inside,
            "harness": lane - sum(inside.values()), **counts, "agent starts": float(starts[0]),
            "agents started": float(starts[1]), **each}


def print_phases(phases: dict[str, float], seconds: float) -> None:
    lane = phases["lane-seconds"] or 1.0
    for name in ("start-up", "servers", "probes", "catch-up", "after", "teardown"):
        print(f"  {name:>12}: {phases[name]:6.1f} s  {100 * phases[name] / seconds:4.0f}% of the run")
    for name in ("resets", "connects", "statements", "harness"):
        print(f"  {name:>12}: {phases[name]:6.1f} lane-s {100 * phases[name] / lane:4.0f}% of the probes' lane time")
    print(f"  per run: {phases.get('connects per run', 0):.1f} connects, {phases.get('statements per run', 0):.1f} "
          "statements; the slowest probes (lane-s over all their runs):")
    slow = sorted(((v, k) for k, v in phases.items() if k.startswith("probe ")), reverse=True)[:5]
    for seconds, name in slow:
        print(f"  {name[6:]:>28}: {seconds:6.1f} lane-s {100 * seconds / lane:4.0f}%")


def load() -> str:
    """The machine's 1-minute load average now (other jobs move every figure: print it beside them)."""
    return f"{os.getloadavg()[0]:.1f}"


def floor(pg_spec: str, runs: int) -> float:
    """Runs a second of the same work with no harness: two direct connections, the statements, close."""
    with NativeBackend() as backend:
        pg = backend.resolve_pg(parse_spec(pg_spec, "--pg"))
        conninfo = backend.postgres(pg).as_user(APP_ROLE).conninfo()

        def one(_: int) -> None:
            with psycopg.connect(conninfo, autocommit=True) as a, psycopg.connect(conninfo, autocommit=True) as b:
                for n in range(STATEMENTS_PER_RUN // 2):
                    a.execute(f"SELECT {n}, pg_backend_pid()", prepare=False).fetchall()
                    b.execute(f"SELECT {n}, pg_backend_pid()", prepare=False).fetchall()

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=default_jobs()) as pool:
            list(pool.map(one, range(runs)))
        return runs / (time.perf_counter() - start)


def synthetic(n: int) -> results.Results:
    """`n` outcomes over every probe, 20 PostgreSQL versions and as many PgBouncer columns as it takes."""
    verdicts = (Verdict.ISOLATED, Verdict.LEAKS, Verdict.LOST, Verdict.BREAKS)
    out = []
    for i in range(n):
        cell, probe = divmod(i, len(PROBES))
        pooler = Pooler(PoolerKind.PGBOUNCER, Version.parse(f"1.{cell // 20}.0"))
        target = Target(Version.parse(f"16.{cell % 20}"), pooler, Route.TRANSACTION, Driver("psycopg"))
        out.append(Outcome(PROBES[probe].id, target, verdicts[i % 4], f"A: SET x = {i}; B: SHOW x -> {i}"))
    return results.Results(tuple(out))


def merge_phase(n: int) -> tuple[float, float]:
    """Seconds of `leakcheck merge` of `n` outcomes (record, JUnit, HTML and Markdown written), and of
    its floor: the same results file read and written as JSON."""
    with tempfile.TemporaryDirectory() as here:
        path = os.path.join(here, "a.json")
        results.save(Path(path), synthetic(n))
        start = time.perf_counter()
        merge.run([Path(path)], None, Path(here, "m.json"), Path(here, "j.xml"), say=lambda line: None,
                  report_html=Path(here, "r.html"), report_md=Path(here, "r.md"))
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        with open(os.path.join(here, "copy.json"), "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
        return seconds, time.perf_counter() - start


def per_driver(pg: str, bouncer: str, base: float, only: list[str], pairs: int = 1) -> None:
    """Each driver's matrix (`only` these, else every one) right after one of psycopg's, `pairs` times, each
    after its agent is installed and built (`leakcheck prepare`, untimed, as the servers are): runs, the median
    pair's seconds and runs a second, its ratio to the floor (`base` runs a second) and to psycopg's (the
    target: within a factor of 2) with every pair's, as a Markdown table. Beside them what moves less with the
    machine's other jobs: the CPU the matrix's processes used a run (pytest, the servers it reaped and the
    agents), and the agents it started with their lane-seconds from start to hello (inside the connects)."""
    print("| driver | runs | seconds | runs/s | ratio to the floor | ratio to psycopg | each pair's | CPU ms/run "
          "| agents started (lane-s) | load |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    every = ("psycopg", "asyncpg", *(s.spec.id for s in CATALOGUE))
    for driver in dict.fromkeys(only) if only else every:
        for each in dict.fromkeys(("psycopg", driver)):  # warm, as the matrix is: a first use builds the agent
            subprocess.run([sys.executable, "-m", "leakcheck.cli.main", "prepare", f"--pg={pg}",
                            f"--bouncer={bouncer}", f"--drivers={each}"], stdout=subprocess.DEVNULL, check=False)
        measured = []
        before = load()
        for _ in range(max(1, pairs)):
            psycopg_runs, psycopg_seconds = matrix(pg, bouncer, None, "psycopg")
            used = children_cpu()
            phases: dict[str, float] = {}
            runs, seconds = matrix(pg, bouncer, None, driver, phases)
            ratio = (runs / seconds) / (psycopg_runs / psycopg_seconds) if psycopg_runs else 0.0  # 0: psycopg's failed
            measured.append((ratio, runs, seconds, children_cpu() - used, phases))
        ratio, runs, seconds, cpu, phases = sorted(measured, key=lambda m: m[0])[len(measured) // 2]  # even: upper
        rate = runs / seconds
        print(f"| {driver} | {runs} | {seconds:.1f} | {rate:.1f} | {rate / base:.2f} | {ratio:.2f} | "
              f"{', '.join(f'{m[0]:.2f}' for m in measured)} | {1000 * cpu / max(1, runs):.0f} | "
              f"{phases.get('agents started', 0):.0f} ({phases.get('agent starts', 0):.1f}) | {before}-{load()} |",
              flush=True)


def children_cpu() -> float:
    """CPU seconds (user and system) of this process's children that have ended, and of theirs they reaped."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def scan_log(path: Path, megabytes: int) -> None:
    """A stderr log of about `megabytes` MB as an application writes it with log_statement=all: 200 sessions;
    extended-protocol statements with bound parameters (the same texts again and again), named prepared
    statements (pgjdbc's S_n), simple-protocol statements with their constants inline (a new text each
    time), transaction blocks, and a few session SETs, set_config calls and advisory locks."""
    texts = [f"SELECT o.id, o.total, c.name FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.id = $1 "
             f"AND o.tenant = $2 /* query {n} */" for n in range(300)]
    block: list[str] = []
    for i in range(10_000):
        pid, stamp = 4000 + i % 200, f"2026-12-01 10:{i // 600 % 60:02d}:{i % 60:02d}.{i % 1000:03d} UTC"
        kind = i % 20
        if kind < 10:
            block.append(f"{stamp} [{pid}] LOG:  execute <unnamed>: {texts[i % 300]}\n"
                         f"{stamp} [{pid}] DETAIL:  parameters: $1 = '{i}', $2 = 'acme'\n")
        elif kind < 14:
            block.append(f"{stamp} [{pid}] LOG:  execute S_{i % 40}: {texts[i % 40]}\n")
        elif kind < 17:
            block.append(f"{stamp} [{pid}] LOG:  statement: UPDATE accounts SET balance = balance - {i % 997} "
                         f"WHERE id = {i} AND version = {i % 13}\n")
        elif kind == 17:
            block.append(f"{stamp} [{pid}] LOG:  statement: BEGIN\n{stamp} [{pid}] LOG:  statement: SELECT "
                         f"set_config('app.tenant', '{i % 50}', true)\n{stamp} [{pid}] LOG:  statement: COMMIT\n")
        elif kind == 18:
            block.append(f"{stamp} [{pid}] LOG:  statement: SET statement_timeout = {i % 30}000\n")
        else:
            block.append(f"{stamp} [{pid}] LOG:  statement: SELECT pg_advisory_lock({i % 7})\n"
                         f"{stamp} [{pid}] LOG:  statement: SELECT pg_advisory_unlock({i % 7})\n")
    text = "".join(block)
    with path.open("w", encoding="utf-8") as out:
        for _ in range(max(1, megabytes * 1_000_000 // len(text))):
            out.write(text)


def scan_phase(megabytes: int) -> None:
    """`leakcheck scan` of a generated log against the floor of reading it; one line each, then the figure."""
    here = Path(tempfile.mkdtemp(prefix="leakcheck-scan-bench-"))
    try:
        log, report = here / "postgresql.log", here / "scan.json"
        scan_log(log, megabytes)
        size = log.stat().st_size
        verdicts = Path(__file__).resolve().parents[1] / "docs" / "measured" / "native-bookworm.results.json.gz"
        before = load()
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "leakcheck.cli.main", "scan", f"--results={verdicts}",
                               f"--report-json={report}", str(log)], capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        if done.returncode not in (0, 1):
            raise SystemExit(f"leakcheck scan failed ({done.returncode}): {done.stderr}")
        statements = json.loads(report.read_text())["statements"]
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import sys\nfor _ in open(sys.argv[1], encoding='utf-8', "
                        "errors='replace', newline=''): pass", str(log)], check=True)
        base = time.perf_counter() - start
        print(f"scan of a {size / 1e6:.0f} MB log, {statements:,} statements: {seconds:.1f} s = "
              f"{statements / seconds:,.0f} statements/s, {size / 1e6 / seconds:.1f} MB/s (peak RSS of its "
              f"process {peak:.0f} MiB; load {before}-{load()})")
        print(f"scan floor (Python reading the same file line by line): {base:.1f} s = "
              f"{statements / base:,.0f} statements/s; ratio (floor s / scan s) {base / seconds:.2f}", flush=True)
    finally:
        shutil.rmtree(here, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg", default="16,17,18")
    parser.add_argument("--bouncer", default="1.18,1.24,1.26")
    parser.add_argument("--cold", action="store_true", help="also time a first run with an empty cache")
    # 4N outcomes must stay under the 64 MiB an input file may have (config/inputs.py): 40,000 are ~26 MiB
    parser.add_argument("--merge-outcomes", type=int, default=10_000, help="N for the merge phase (also 4N)")
    parser.add_argument("--no-merge", action="store_true", help="skip the merge phase")
    parser.add_argument("--merge-only", action="store_true", help="only the merge phase (no server)")
    parser.add_argument("--drivers", nargs="?", const="", default=None, metavar="IDS",
                        help="also the matrix of each driver (or of these, comma separated), each after one of "
                        "psycopg's (psycopg's own row pairs it with itself: the machine's noise)")
    parser.add_argument("--rounds", type=int, default=3, help="matrix-then-floor rounds; the median ratio is the "
                        "figure (other jobs on the machine move single rounds by 0.1 and more)")
    parser.add_argument("--driver-rounds", type=int, default=1, help="psycopg-then-driver pairs per driver with "
                        "--drivers; the median pair's ratio to psycopg is the figure")
    parser.add_argument("--scan", action="store_true", help="also the scan phase (leakcheck scan of a generated log)")
    parser.add_argument("--scan-only", action="store_true", help="only the scan phase (no server)")
    parser.add_argument("--scan-mb", type=int, default=200, help="the generated log's size in MB (default 200)")
    args = parser.parse_args()
    if args.scan or args.scan_only:
        scan_phase(args.scan_mb)
    if args.scan_only:
        return
    for n in () if args.no_merge else (args.merge_outcomes, 4 * args.merge_outcomes):
        seconds, base = merge_phase(n)
        print(f"merge of {n} outcomes (every output): {seconds:.2f} s; floor (read and write them as JSON): "
              f"{base:.2f} s; ratio {seconds / base:.1f}")
    if args.merge_only:
        return
    rounds = []
    for n in range(1, args.rounds + 1):
        phases: dict[str, float] = {}
        before = load()
        runs, seconds = matrix(args.pg, args.bouncer, None, phases=phases)
        rate = runs / seconds
        base = floor(args.pg.split(",")[0], runs)
        rounds.append((rate / base, seconds, phases, base))
        print(f"round {n}: warm matrix --pg={args.pg} --bouncer={args.bouncer}: {runs} probe runs in {seconds:.1f} s "
              f"= {rate:.1f} runs/s ({default_jobs()} lanes at a time, {os.cpu_count()} cores; load {before}-{load()})")
        print(f"round {n}: floor (same runs, {STATEMENTS_PER_RUN} statements on 2 direct connections, no harness): "
              f"{base:.1f} runs/s; ratio {rate / base:.2f}", flush=True)
    ratio, seconds, phases, base = sorted(rounds, key=lambda r: r[0])[len(rounds) // 2]
    print(f"ratio to the floor, the median of {len(rounds)} round(s): {ratio:.2f} "
          f"(all: {', '.join(f'{r[0]:.2f}' for r in rounds)})")
    if phases:
        print("where that round's warm matrix's time went (LEAKCHECK_TIMINGS):")
        print_phases(phases, seconds)
    if args.drivers is not None:
        per_driver(args.pg, args.bouncer, base, [d for d in args.drivers.split(",") if d], args.driver_rounds)
    if args.cold:
        cold = tempfile.mkdtemp(prefix="leakcheck-cold-")
        os.chmod(cold, 0o755)
        try:
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "leakcheck.cli.main", "prepare", f"--pg={args.pg}",
                            f"--bouncer={args.bouncer}"], env={**os.environ, "LEAKCHECK_CACHE": cold},
                           stdout=subprocess.DEVNULL, check=False)
            prepared = time.perf_counter() - start
            runs, seconds = matrix(args.pg, args.bouncer, cold)
            print(f"cold: fetch and build {prepared:.1f} s, then the matrix {seconds:.1f} s; "
                  f"first run in all {prepared + seconds:.1f} s")
        finally:
            shutil.rmtree(cold, ignore_errors=True)


if __name__ == "__main__":
    main()
