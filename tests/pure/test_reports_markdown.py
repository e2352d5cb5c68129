"""The Markdown report: tables per PostgreSQL version, problem cells folded, escaping, a size limit."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from leakcheck.model.target import Route
from leakcheck.model.verdicts import Fact, Outcome, Verdict
from leakcheck.reports.about import About
from leakcheck.reports.markdown import LIMIT, MIN_LIMIT, md_text, render_markdown
from tests.pure.outcomes import make

HOSTILE = "A: SET x = 'a|b' </pre></details> <script>alert(\"x\")</script> `tick` **bold** & more"
UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def leak(probe: str = "statement_timeout", pg: str = "16.14", evidence: str = "A: SET ...", **rest: Any) -> Outcome:
    return make(probe, pg, "1.24.1", Route.TRANSACTION, "psycopg", Verdict.LEAKS, evidence, facts=(Fact.LEAKED,),
                **rest)


def run() -> list[Outcome]:
    return [
        leak(), leak("rls_tenant", security=True),
        make("timezone", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.ISOLATED, "tz"),
        leak(pg="18.4"),
        make("timezone", "16.14", "", Route.DIRECT, "psycopg", Verdict.ISOLATED, "e"),
        make("timezone", "16.14", "", Route.SHARED, "psycopg", Verdict.LEAKS, "e"),
    ]


def test_a_title_counts_and_one_table_per_postgresql_version() -> None:
    text = render_markdown(run(), title="leakcheck: PgBouncer 1.24")
    lines = text.splitlines()
    assert lines[0] == "## leakcheck: PgBouncer 1.24"
    assert "verdicts: 2 isolated, 4 leaks" in text
    assert lines.count("### PostgreSQL 16.14") == 1 and lines.count("### PostgreSQL 18.4") == 1
    assert "| probe | pgbouncer1.24.1/psycopg |" in lines
    assert "| statement\\_timeout | **LEAKS** |" in lines and "| timezone | isolated |" in lines
    assert "| rls\\_tenant **\\[security\\]** | **LEAKS** |" in lines


def test_controls_are_summarized_and_the_legend_explains_the_words() -> None:
    text = render_markdown(run())
    assert "- direct control (two direct sessions, must be isolated): 1 isolated" in text
    assert "- shared control (A and B on one direct session): 1 leaks" in text
    assert "- **LEAKS**: the other client saw the state" in text


def test_each_problem_cell_folds_its_evidence_and_advice_and_isolated_cells_fold_nothing() -> None:
    text = render_markdown(run())
    assert text.count("<details>") == 3  # three leaks through the pooler; controls and isolated cells: none
    folded = text[text.index("<details><summary>statement_timeout"):]
    assert "<pre>A: SET ...</pre>" in folded and "**What to do:** Set statement\\_timeout per transaction" in folded
    assert "`SET LOCAL statement_timeout = '5s'`" in folded  # code spans kept
    assert "<pre>tz</pre>" not in text


def test_evidence_cannot_break_out_of_its_block() -> None:
    text = render_markdown([leak(evidence=HOSTILE)])
    assert "<script>" not in text and "</pre></details>" not in text
    assert "&lt;/pre&gt;&lt;/details&gt; &lt;script&gt;alert(\"x\")&lt;/script&gt;" in text
    assert text.count("<pre>") == text.count("</pre>") == 1
    assert text.count("<details>") == text.count("</details>") == 1


def test_table_cells_escape_pipes_and_markdown() -> None:
    odd = make("timezone", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.ISOLATED, "e",
               settings=(("application_name", "a|b<c>*d*"),))
    header = next(line for line in render_markdown([odd]).splitlines() if line.startswith("| probe"))
    assert len(UNESCAPED_PIPE.findall(header)) == 3  # two cells: probe and the one column
    assert "a\\|b&lt;c&gt;" not in header and "a\\|b\\<c\\>\\*d\\*" in header
    assert md_text("x & y\nz") == "x &amp; y z"


def test_a_long_report_is_cut_under_the_limit_with_a_note_of_what_is_left_out() -> None:
    many = [leak(f"probe_{i:03}", evidence="x" * 900) for i in range(200)]
    text = render_markdown(many, limit=20_000)
    assert len(text) <= 20_000
    note = text.strip().splitlines()[-1]
    assert re.match(r"\*\*… (\d+) more problem cells not shown\*\* \(this report is cut at 20000 characters", note)
    shown = text.count("<details>")
    assert shown > 0 and int(re.findall(r"… (\d+) more", note)[0]) == 200 - shown
    assert text.count("| probe\\_") == 200  # the table comes first, whole


def test_even_the_tables_are_cut_when_they_alone_exceed_the_limit() -> None:
    many = [leak(f"probe_{i:04}_{'y' * 60}") for i in range(400)]
    text = render_markdown(many, limit=5_000)
    assert len(text) <= 5_000 and "more table rows" in text and "400 more problem cells" in text


def test_the_default_limit_fits_a_github_comment_and_a_tiny_one_is_refused() -> None:
    many = [leak(f"probe_{i:03}", evidence="x" * 2000) for i in range(100)]
    assert LIMIT < 65_536 and len(render_markdown(many)) <= LIMIT
    with pytest.raises(ValueError, match="at least"):
        render_markdown(many, limit=MIN_LIMIT - 1)


def test_a_report_that_fits_has_no_note() -> None:
    assert "not shown" not in render_markdown(run())


def test_a_label_with_blank_lines_cannot_end_its_details_block() -> None:
    # A blank line ends an HTML block in Markdown: what follows it would render (an image, raw HTML).
    odd = leak(settings=(("application_name", "a\n\n![img](https://example.com/i.png)\n\n<b>x</b>"),))
    text = render_markdown([odd])
    summary = text[text.index("<details><summary>"):text.index("</summary>")]
    assert "\n" not in summary and "<b>" not in text
    block = text[text.index("<details>"):text.index("</details>")]
    assert "\n\n![img]" not in block


def test_no_control_character_of_a_label_or_the_evidence_reaches_the_report() -> None:
    odd = leak(evidence="A: SET x = '\x1b[31mred\x1b]0;title\x07'", settings=(("application_name", "a\x1b[2Jb\rc"),))
    text = render_markdown([odd, leak("timezone", evidence="\x9b2J\u202e")], title="t\x1b[1m")
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", text)
    assert "\\x1b[31mred" in text  # shown, escaped, as the terminal report shows it


def test_the_header_says_when_by_which_leakcheck_and_on_which_servers_and_escapes_them() -> None:
    about = About(datetime(2026, 12, 6, 10, 32, tzinfo=UTC), "0.1.0",
                  ("PostgreSQL 16.14: /cache/postgres/16.14/bin (cache)", "PgBouncer 1.24.1: /x_y/pgbouncer (cache)"))
    lines = render_markdown(run(), about=about).splitlines()
    assert lines[:7] == ["## leakcheck", "", "measured 2026-12-06 10:32 UTC by leakcheck 0.1.0, on:", "",
                         "- PostgreSQL 16.14: /cache/postgres/16.14/bin (cache)",
                         "- PgBouncer 1.24.1: /x\\_y/pgbouncer (cache)", ""]
    assert lines[7].startswith("verdicts: ")
    assert "by leakcheck" not in render_markdown(run())  # a caller that gives none gets none
