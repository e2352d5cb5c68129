"""`leakcheck merge`: several runs' --results files as one report and one gate decision.

CI runs one job per (PostgreSQL, PgBouncer) cell through its own matrix, each with
`pytest ... --results=results-<cell>.json`; a last job merges them. The report is the plugin's
terminal matrix, the gate the plugin's rule (`judge.problem`), --record the plugin's write
(`record.finish`): a merged run and a single run over the whole matrix say the same.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from leakcheck.config.distinct_paths import EXPECT, check_own_files
from leakcheck.gate import expectations
from leakcheck.gate.baseline import Expectation
from leakcheck.gate.judge import Judgement, Kind, Policy, judge
from leakcheck.model.errors import UsageError
from leakcheck.model.safe_text import terminal_safe, xml_safe
from leakcheck.model.verdicts import Outcome
from leakcheck.probes import PROBES
from leakcheck.probes.base import Probe
from leakcheck.reports.about import About, releases
from leakcheck.reports.terminal import render_legend, render_matrix
from leakcheck.results import outputs
from leakcheck.results.results import Results, combine, load, name_of, properties

EXIT_PASSED, EXIT_FAILED = 0, 1


@dataclass(frozen=True)
class Judged:
    """Each outcome's failure message, what was accepted or not applicable, and the tests that measured nothing."""

    results: Results
    failures: dict[Outcome, str]
    #: accepted problems (expected failures) and not-applicable runs, with their messages
    passed_as: dict[Outcome, Judgement] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        return len(self.failures) + len(self.results.unmeasured)

    @property
    def passed(self) -> int:
        return len(self.results.outcomes) - len(self.failures)


def probe_of(outcome: Outcome, known: Mapping[str, Probe]) -> Probe:
    probe = known.get(outcome.probe)
    if probe is None:
        raise UsageError(f"{name_of(outcome)}: unknown probe {outcome.probe!r}; merge results written by "
                         "this leakcheck version")
    return probe


def judge_all(results: Results, expected: Mapping[str, Expectation] | None, required: frozenset[str] | None = None,
              update: bool = False) -> Judged:
    """Every outcome judged by the plugin's rule (pure); an unknown probe id is a UsageError."""
    known = {p.id: p for p in PROBES}
    policy = Policy(expected=expected, required=required, update=update)
    failures: dict[Outcome, str] = {}
    passed_as: dict[Outcome, Judgement] = {}
    for outcome in results.outcomes:
        judged = judge(probe_of(outcome, known), outcome, policy)
        if judged.fails:
            failures[outcome] = judged.message
        elif judged.kind is not Kind.PASSED:
            passed_as[outcome] = judged
    return Judged(results, failures, passed_as)


def report(judged: Judged, sources: int | str, color: bool = False) -> list[str]:
    """The terminal report: the plugin's matrix (with its legend) and counts, each failure, then one
    line on the gate. `color`: ANSI colours in the matrix (the CLI decides: reports/terminal.py's use_color).
    `sources`: how many results files were merged, or what else the outcomes come from."""
    outcomes = judged.results.outcomes
    origin = sources if isinstance(sources, str) else f"merged from {sources} results file{'s' if sources != 1 else ''}"
    lines = [f"leakcheck matrix ({origin})", ""]
    if outcomes:
        lines += render_matrix(outcomes, color=color).splitlines() + render_legend(outcomes, color=color).splitlines()
    lines += [terminal_safe(f"FAILED {name_of(o)}: {why}", newlines=False) for o, why in judged.failures.items()]
    lines += [terminal_safe(f"FAILED {u.test}: measured nothing ({u.why})", newlines=False)
              for u in judged.results.unmeasured]
    return lines


def _element(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    """A child whose every attribute and text XML 1.0 can hold (`xml_safe`: evidence holds any character)."""
    child = ET.SubElement(parent, tag, {k: xml_safe(v) for k, v in attrs.items()})
    if text is not None:
        child.text = xml_safe(text)
    return child


def junit(judged: Judged, expected: Mapping[str, Expectation] | None) -> str:
    """A JUnit XML report with one test case per outcome, named and with properties as the plugin's."""
    root = ET.Element("testsuites")
    suite = _element(root, "testsuite", name="leakcheck",
                     tests=str(len(judged.results.outcomes) + len(judged.results.unmeasured)),
                     failures=str(judged.failed), errors="0", skipped=str(len(judged.passed_as)))
    for outcome in judged.results.outcomes:
        case = _element(suite, "testcase", classname="leakcheck", name=name_of(outcome))
        props = _element(case, "properties")
        keyed = expected is not None and not outcome.route.is_control
        extra = [("matrix_key", expectations.key(outcome))] if keyed else []
        for name, value in [*properties(outcome), *extra]:
            _element(props, "property", name=name, value=value)
        if outcome in judged.failures:
            _element(case, "failure", judged.failures[outcome], message=judged.failures[outcome])
        elif outcome in judged.passed_as:  # as pytest's junitxml writes an xfail or a skip
            said = judged.passed_as[outcome]
            kind = "pytest.xfail" if said.kind is Kind.ACCEPTED else "pytest.skip"
            _element(case, "skipped", said.message, type=kind, message=said.message)
    for item in judged.results.unmeasured:
        case = _element(suite, "testcase", classname="leakcheck", name=item.test.split("::", 1)[-1])
        _element(case, "failure", item.why, message=f"measured nothing: {item.why}")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def run(paths: Sequence[Path], expect: Path | None, record_to: Path | None, junit_to: Path | None,
        say: Callable[[str], None] = print, *, required: frozenset[str] | None = None,
        report_html: Path | None = None, report_md: Path | None = None, results_to: Path | None = None,
        color: bool = False) -> int:
    """Load, check, judge, report and write; 0 when everything passed, 1 when anything failed.

    Every input (each results file, --expect, the --record, --results, --junitxml, --report-html and
    --report-md targets) is checked before anything is printed or written: a problem is a
    UsageError (exit 4 in the CLI). The files are written as the run that measured would
    (outputs.write): merging one results file writes what its run wrote, but for the reports' header (a
    results file names each server's release, not where it came from).
    """
    targets = outputs.Outputs(record=record_to, results=results_to, report_html=report_html, report_md=report_md,
                              junit=junit_to)
    check_own_files(targets.named(),
                    {EXPECT: expect, **{f"a results file being merged ({p})": p for p in paths}},
                    may_rewrite=("--record", EXPECT))
    merged = combine([(str(p), load(p)) for p in paths])
    expected = expectations.load(expect) if expect is not None else None
    outputs.check(targets)
    judged = judge_all(merged, expected, required)
    for line in report(judged, len(paths), color):
        say(line)
    files = f"{len(paths)} results file{'s' if len(paths) != 1 else ''}"
    about = About.now(releases(merged.outcomes), "merged", f" from {files} measured")
    lines, written = outputs.write(targets, merged, None, lambda: junit(judged, expected), about)
    for line in lines:
        say(terminal_safe(f"leakcheck: {line}", newlines=False))
    if not merged.outcomes:
        say("leakcheck: the results hold no outcome: a gate that measured nothing fails")
    say(f"leakcheck: {judged.passed} passed, {judged.failed} failed")
    return EXIT_FAILED if judged.failed or not merged.outcomes or not written else EXIT_PASSED
