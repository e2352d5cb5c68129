#!/usr/bin/env python3
"""Timings for leakcheck (performance lives here, not in timed tests).

    python scripts/benchmark.py                    # warm: per-step and per-probe timings, then a matrix run
    python scripts/benchmark.py --cold             # also a matrix run with an empty cache
    python scripts/benchmark.py --pg 16 --bouncer 1.24 --no-matrix

Prints one line per measurement; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from leakcheck.clients import Driver
from leakcheck.probes import PROBES
from leakcheck.provision.native import NativeBackend
from leakcheck.runner import Target, run_probe
from leakcheck.verdicts import Route
from leakcheck.versions import parse_spec

ROOT = Path(__file__).resolve().parent.parent


def timed(label: str, fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = fn()
    print(f"{label:<55} {time.perf_counter() - start:8.2f} s")
    return value


def steps(pg_spec: str, bouncer_spec: str, rounds: int) -> None:
    with NativeBackend(progress=lambda m: None) as backend:
        pg = timed(f"resolve PostgreSQL {pg_spec} (warm cache)",
                   lambda: backend.resolve_pg(parse_spec(pg_spec, "--pg")))
        bouncer = timed(f"resolve PgBouncer {bouncer_spec} (warm cache)",
                        lambda: backend.resolve_bouncer(parse_spec(bouncer_spec, "--bouncer")))
        timed(f"start PostgreSQL {pg} (template copy + start)", lambda: backend.postgres(pg))
        per_probe: dict[str, list[float]] = defaultdict(list)
        for _ in range(rounds):
            for driver in Driver:
                for probe in PROBES:
                    start = time.perf_counter()
                    run_probe(backend, probe, Target(pg, bouncer, Route.TRANSACTION, driver))
                    per_probe[probe.id].append(time.perf_counter() - start)
        for probe_id, times in per_probe.items():
            print(f"  probe {probe_id:<40} median {statistics.median(times) * 1000:7.1f} ms  (n={len(times)})")
        every = [t for ts in per_probe.values() for t in ts]
        print(f"{'one probe incl. a fresh PgBouncer (median)':<55} {statistics.median(every):8.3f} s")


def matrix(pg: str, bouncer: str, cache: str | None) -> None:
    env = dict(os.environ)
    if cache is not None:
        env["LEAKCHECK_CACHE"] = cache
    label = f"pytest --pg={pg} --bouncer={bouncer} ({'cold cache' if cache else 'warm cache'})"
    with tempfile.TemporaryDirectory() as empty:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--rootdir={empty}", empty,
               f"--pg={pg}", f"--bouncer={bouncer}"]
        timed(label, lambda: subprocess.run(cmd, env=env, cwd=empty, stdout=subprocess.DEVNULL, check=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg", default="16,17,18")
    parser.add_argument("--bouncer", default="1.18,1.24,1.26")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="also time a matrix run with an empty cache")
    parser.add_argument("--no-matrix", action="store_true")
    args = parser.parse_args()
    steps(args.pg.split(",")[0], args.bouncer.split(",")[-1], args.rounds)
    if not args.no_matrix:
        matrix(args.pg, args.bouncer, None)
    if args.cold:
        cold = tempfile.mkdtemp(prefix="leakcheck-cold-")
        os.chmod(cold, 0o755)
        try:
            matrix(args.pg, args.bouncer, cold)
        finally:
            shutil.rmtree(cold, ignore_errors=True)


if __name__ == "__main__":
    main()
