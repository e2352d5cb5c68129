"""The repository's GitHub workflows run on this machine, step by step, as a runner would run them.

Each job gets a folder of its own: `workspace/` (actions/checkout: a copy of the tree), `temp/`
(runner.temp and TMPDIR), `cache/` (actions/cache: LEAKCHECK_CACHE, seeded from the session's test
cache by hard links), and the artifacts are one folder shared by the jobs (upload/download-artifact).
actions/setup-python is the worktree's .venv on PATH; the steps with the ids in `LOCAL` are what
scripts/bootstrap already did here. Every other step's `run:` runs as written, with bash -eo pipefail,
the workflow's, job's and step's `env`, in its working-directory, bounded by STEP_TIMEOUT.
"""

from __future__ import annotations

import fnmatch
import itertools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.cache import seed

ROOT = Path(__file__).resolve().parents[2]
#: Steps (by id) that scripts/bootstrap stands for here: the build packages, and leakcheck in .venv.
LOCAL = {"build-tools": "scripts/bootstrap installed the build packages",
         "install": "the worktree's .venv holds this tree's leakcheck (editable)"}
#: The longest one step may take (a whole gate run of four cells, servers started, on two busy cores).
STEP_TIMEOUT = 400
_EXPR = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")
_SKIPPED_IN_COPY = shutil.ignore_patterns(".git", ".venv", ".tox", "site", "__pycache__", "*.egg-info",
                                          ".mypy_cache", ".ruff_cache", "report*.xml")


@dataclass
class Step:
    name: str
    returncode: int
    output: str


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / ".github/workflows" / name).read_text(encoding="utf-8"))
    return data


def matrix_of(job: dict[str, Any]) -> list[dict[str, str]]:
    """Every combination of the job's strategy matrix (one empty one without a matrix)."""
    axes = job.get("strategy", {}).get("matrix", {})
    names = list(axes)
    return [dict(zip(names, map(str, values), strict=True)) for values in itertools.product(*(axes[n] for n in names))]


def _expand(text: str, context: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1) not in context:
            raise AssertionError(f"the local runner does not know the expression ${{{{ {m.group(1)} }}}} in {text!r}")
        return context[m.group(1)]
    return _EXPR.sub(one, text)


def run_job(workflow: dict[str, Any], job_name: str, matrix: dict[str, str], home: Path, artifacts: Path) -> list[Step]:
    """One job of `workflow` in `home` (made here): every step in order; later steps run after a failure
    only with `if: always()`. Returns what each step that ran gave."""
    job = workflow["jobs"][job_name]
    workspace, temp, cache = home / "workspace", home / "temp", home / "cache"
    home.mkdir(mode=0o755)
    temp.mkdir(mode=0o755)
    context = {"github.workspace": str(workspace), "runner.temp": str(temp), "runner.os": "Linux",
               **{f"matrix.{k}": v for k, v in matrix.items()}}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "PYTEST_"))}
    env |= {"CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(workspace), "RUNNER_TEMP": str(temp),
            "RUNNER_OS": "Linux", "TMPDIR": str(temp), "GITHUB_STEP_SUMMARY": str(home / "summary.md"),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for scope in (workflow.get("env", {}), job.get("env", {})):
        env |= {k: _expand(str(v), context) for k, v in scope.items()}
    done: list[Step] = []
    for i, step in enumerate(job["steps"]):
        if done and any(s.returncode for s in done) and step.get("if") != "always()":
            continue
        name = step.get("name") or step.get("uses") or step.get("run", "").split("\n")[0] or f"step {i + 1}"
        uses, args = step.get("uses", ""), step.get("with", {})
        if uses.startswith("actions/checkout@"):
            shutil.copytree(ROOT, workspace, ignore=_SKIPPED_IN_COPY)
        elif uses.startswith("actions/setup-python@"):
            pass  # PATH starts with the worktree's .venv/bin
        elif uses.startswith("actions/cache@"):
            seed(Path(os.environ["LEAKCHECK_CACHE"]), cache)
            env["LEAKCHECK_CACHE"] = str(cache)
        elif uses.startswith("actions/upload-artifact@"):
            _upload(workspace, artifacts / _expand(args["name"], context), _expand(args["path"], context))
        elif uses.startswith("actions/download-artifact@"):
            _download(artifacts, args["pattern"], workspace)
        elif step.get("id") in LOCAL:
            pass
        elif uses:
            raise AssertionError(f"the local runner has no equivalent of {uses}")
        else:
            done.append(_run(name, _expand(step["run"], context), env | {k: _expand(str(v), context) for k, v in
                             step.get("env", {}).items()}, Path(_expand(step.get("working-directory", str(workspace)),
                                                                       context))))
            continue
        done.append(Step(name, 0, ""))
    return done


def _run(name: str, script: str, env: dict[str, str], cwd: Path) -> Step:
    try:
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        return Step(name, -1, f"timed out after {STEP_TIMEOUT} s: {exc.stdout!s}{exc.stderr!s}")
    return Step(name, proc.returncode, proc.stdout + proc.stderr)


def _upload(workspace: Path, into: Path, paths: str) -> None:
    into.mkdir(parents=True)
    for line in filter(None, (p.strip() for p in paths.splitlines())):
        shutil.copy2(workspace / line, into / Path(line).name)


def _download(artifacts: Path, pattern: str, workspace: Path) -> None:
    """merge-multiple: every matching artifact's files into the workspace."""
    for folder in sorted(artifacts.iterdir()):
        if fnmatch.fnmatch(folder.name, pattern):
            for file in folder.iterdir():
                shutil.copy2(file, workspace / file.name)


def load_action() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    return data


#: What the install step's pip does here: resolve and build leakcheck from the action's folder, offline, and
#: install nothing (the worktree's .venv already holds this tree's leakcheck, editable).
DRY_PIP = {"PIP_DRY_RUN": "1", "PIP_NO_DEPS": "1", "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def run_action(inputs: dict[str, str], home: Path) -> list[Step]:
    """The composite action (action.yml) as a runner runs it, in `home` (made here): its folder a copy of
    the tree (`action/`), the workspace `workspace/` (made by the caller's files in `inputs`' paths, or
    empty), every `run:` step in order with bash -eo pipefail, its `env` expanded from the inputs (their
    defaults, then `inputs`), `github.action_path` and the earlier steps' `GITHUB_OUTPUT`; a failed step
    ends the action. actions/setup-python is the worktree's .venv on PATH."""
    action = load_action()
    unknown = set(inputs) - set(action["inputs"])
    assert not unknown, f"action.yml has no input(s) {sorted(unknown)}"
    folder, workspace, temp = home / "action", home / "workspace", home / "temp"
    shutil.copytree(ROOT, folder, ignore=_SKIPPED_IN_COPY)
    workspace.mkdir(exist_ok=True)
    temp.mkdir(mode=0o755, exist_ok=True)
    context = {f"inputs.{k}": str(v.get("default", "")) for k, v in action["inputs"].items()}
    context |= {f"inputs.{k}": v for k, v in inputs.items()} | {"github.action_path": str(folder),
                                                               "github.workspace": str(workspace)}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "PYTEST_", "PIP_"))}
    env |= {"CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(workspace), "RUNNER_TEMP": str(temp),
            "TMPDIR": str(temp), "GITHUB_STEP_SUMMARY": str(home / "summary.md"), "GITHUB_ACTION_PATH": str(folder),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", **DRY_PIP}
    done: list[Step] = []
    for i, step in enumerate(action["runs"]["steps"]):
        name = step.get("id") or step.get("uses") or f"step {i + 1}"
        uses = step.get("uses", "")
        if uses:
            assert uses.startswith("actions/setup-python@"), f"the local runner has no equivalent of {uses}"
            done.append(Step(name, 0, ""))
            continue
        assert step.get("shell") == "bash", f"step {name} must say shell: bash (a composite step must name one)"
        outputs = home / f"output-{i}"
        outputs.touch()
        said = _run(name, _expand(step["run"], context), env | {"GITHUB_OUTPUT": str(outputs)} | {
            k: _expand(str(v), context) for k, v in step.get("env", {}).items()}, workspace)
        done.append(said)
        for line in outputs.read_text().splitlines():
            key, _, value = line.partition("=")
            context[f"steps.{step.get('id')}.outputs.{key}"] = value
        if said.returncode:
            break
    return done
