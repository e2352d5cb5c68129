"""The HTML page: self-contained, every outcome text escaped, cells with stable hooks and their details."""

from __future__ import annotations

import base64
import hashlib
import re
from datetime import UTC, datetime
from html.parser import HTMLParser

from leakcheck.model.target import Route
from leakcheck.model.verdicts import Fact, Outcome, Verdict
from leakcheck.reports.about import About
from leakcheck.reports.html import render_html
from tests.pure.outcomes import make

HOSTILE = "A: PREPARE s AS SELECT '</pre><script>alert(\"x\")</script>' \"quoted\" & 'single' <img src=x>"
VOID = {"meta", "input", "wbr", "br", "img", "link"}


class Structure(HTMLParser):
    """Tags opened and closed in order, attributes of every element, and the text of script elements."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.elements: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.problems.append(f"unexpected </{tag}>")


def parsed(page: str) -> Structure:
    s = Structure()
    s.feed(page)
    s.close()
    return s


def run() -> list[Outcome]:
    return [
        make("sql_prepare", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.LEAKS, HOSTILE,
             facts=(Fact.LEAKED,)),
        make("rls_tenant", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.LEAKS, "tenant rows",
             facts=(Fact.LEAKED, Fact.LOST), security=True),
        make("timezone", "16.14", "1.24.1", Route.TRANSACTION, "asyncpg", Verdict.ISOLATED, "tz ok"),
        make("timezone", "18.4", "1.26.1", Route.TRANSACTION, "psycopg", Verdict.NOT_APPLICABLE, "refused"),
        make("timezone", "16.14", "", Route.SHARED, "psycopg", Verdict.LEAKS, "shared"),
    ]


def test_the_page_is_well_formed_and_has_only_its_own_script() -> None:
    page = render_html(run())
    s = parsed(page)
    assert not s.problems and s.stack == []
    assert [tag for tag, _ in s.elements].count("script") == 1 and page.count("<script") == 1


def test_evidence_with_markup_and_quotes_is_escaped_everywhere() -> None:
    page = render_html(run())
    assert "<img" not in page and "alert(\"x\")" not in page and "</pre><script>" not in page
    assert "&lt;/pre&gt;&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&#x27; &quot;quoted&quot; &amp;" in page


def test_nothing_is_loaded_from_anywhere() -> None:
    page = render_html(run())
    s = parsed(page)
    assert not [(t, a) for t, a in s.elements if {"src", "href", "srcset", "action", "poster"} & a.keys()]
    assert not re.search(r"https?:|//[a-z]|url\(|@import|fetch\(|XMLHttpRequest", page.replace("&#x27;", "'"))
    csp = next(a for t, a in s.elements if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert (csp.get("content") or "").startswith("default-src 'none'")


def test_every_cell_has_stable_hooks_and_a_details_article_with_evidence_and_advice() -> None:
    s = parsed(render_html(run()))
    cells = [a for t, a in s.elements if t == "td" and a.get("data-testid") == "cell"]
    assert len(cells) == 5
    assert {(c["data-probe"], c["data-verdict"]) for c in cells} == {
        ("sql_prepare", "leaks"), ("rls_tenant", "leaks"), ("timezone", "isolated"), ("timezone", "not_applicable"),
        ("timezone", "leaks")}  # the last: the shared control, in its own table
    leak = next(c for c in cells if c["data-probe"] == "sql_prepare")
    assert leak["data-column"] == "pgbouncer1.24.1/psycopg" and leak["data-grid"] == "PostgreSQL 16.14"
    articles = {a["id"] for t, a in s.elements if t == "article"}
    assert {c["data-detail"] for c in cells} == articles


def test_an_article_holds_the_cells_evidence_advice_and_facts() -> None:
    page = render_html(run())
    key = re.search(r'data-probe="rls_tenant" [^>]*data-detail="(d\d+)"', page)
    assert key is not None
    article = page[page.index(f'<article id="{key.group(1)}"'):]
    article = article[:article.index("</article>")]
    assert "tenant rows" in article and "LEAKS+lost" in article and "leaked, lost" in article
    assert "<code>set_config(&#x27;app.tenant&#x27;, ..., true)</code>" in article  # advice with code spans
    assert "row-level security" in article  # the probe's state, from the registry


def test_security_probes_are_marked_and_filters_offer_the_verdicts_present() -> None:
    s = parsed(render_html(run()))
    rows = {a["data-probe"]: a["data-security"] for t, a in s.elements if t == "tr" and "data-probe" in a}
    assert rows["rls_tenant"] == "true" and rows["sql_prepare"] == "false"
    boxes = [a["value"] for t, a in s.elements if t == "input" and "data-verdict-filter" in a]
    assert boxes == ["isolated", "leaks", "not_applicable"]
    assert any(a.get("data-testid") == "probe-filter" for _, a in s.elements)


def test_an_empty_run_still_makes_a_page_that_says_so() -> None:
    page = render_html([])
    assert 'data-testid="empty"' in page and not parsed(page).problems


def _sha256_source(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_the_csp_admits_only_the_pages_own_script_and_style_by_their_hashes() -> None:
    page = render_html(run())
    csp = next(a for t, a in parsed(page).elements if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    directives = {d.split()[0]: d.split()[1:] for d in (csp.get("content") or "").split(";") if d.strip()}
    script = re.findall(r"<script>(.*?)</script>", page, re.DOTALL)
    style = re.findall(r"<style>(.*?)</style>", page, re.DOTALL)
    assert len(script) == len(style) == 1
    assert directives["default-src"] == ["'none'"]
    assert directives["script-src"] == [_sha256_source(script[0])]
    assert directives["style-src"] == [_sha256_source(style[0])]
    assert "unsafe" not in (csp.get("content") or "")


class HeaderText(HTMLParser):
    """The text of each column header, as a browser shows it (entities decoded, <wbr> adds nothing)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.inside = False
        self.headers: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "th" and ("scope", "col") in attrs:
            self.inside = True
            self.headers.append("")

    def handle_endtag(self, tag: str) -> None:
        self.inside = self.inside and tag != "th"

    def handle_data(self, data: str) -> None:
        if self.inside:
            self.headers[-1] += data


def test_a_label_with_an_apostrophe_or_markup_shows_as_written() -> None:
    label = "it's <b>&\"1\"/2+x3"
    odd = make("timezone", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.ISOLATED, "e",
               settings=(("application_name", label),))
    reader = HeaderText()
    reader.feed(render_html([odd]))
    assert reader.headers == ["probe", f"pgbouncer1.24.1[application_name={label}]/psycopg"]


def test_the_header_says_when_by_which_leakcheck_and_on_which_servers_escaped() -> None:
    about = About(datetime(2026, 12, 6, 10, 32, tzinfo=UTC), "0.1.0",
                  ("PostgreSQL 16.14: /cache/postgres/16.14/bin (cache)", "PgBouncer 1.24.1: /a<b>/pgbouncer"))
    page = render_html(run(), about=about)
    s = parsed(page)
    assert not s.problems and s.stack == []
    assert ('<p data-testid="about">measured 2026-12-06 10:32 UTC by leakcheck 0.1.0, on:</p>'
            '<ul data-testid="servers"><li>PostgreSQL 16.14: /cache/postgres/16.14/bin (cache)</li>'
            "<li>PgBouncer 1.24.1: /a&lt;b&gt;/pgbouncer</li></ul>") in page
    assert 'data-testid="about"' not in render_html(run())
