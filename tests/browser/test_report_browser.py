"""The HTML report in a real headless browser: cells, filters, the details panel, and no network.

Debian's chromium is driven through Playwright (its own browser download is never used): as root
the test installs the package when it is missing; otherwise it skips, saying what to install.
One browser per module keeps it short.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from leakcheck.model.target import Route
from leakcheck.model.verdicts import Fact, Outcome, Verdict
from leakcheck.reports.html import render_html
from tests.pure.outcomes import make

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Dialog, Page

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
HOSTILE = "A: PREPARE p AS SELECT '<script>alert(\"pwned\")</script>' \"double\" 'single' </pre>"


def ensure_chromium() -> Path:
    """Debian's chromium: installed with apt-get as root when missing; else the test is skipped."""
    if CHROMIUM.exists():
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"{CHROMIUM} is not installed and this user cannot install it: run `apt-get install -y chromium`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, timeout=300)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"], check=True, env=env,
                   timeout=600)
    return CHROMIUM


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    """One persistent Chromium context for the module, in a fresh profile folder removed afterwards."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra (.[dev])")
    executable = ensure_chromium()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="leakcheck-chromium-") as profile, sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(profile, executable_path=str(executable), headless=True,
                                                        args=ARGS, offline=True)
        print(f"chromium launched in {time.perf_counter() - started:.2f}s")
        try:
            yield context
        finally:
            context.close()


def outcomes() -> list[Outcome]:
    def at(probe: str, bouncer: str, verdict: Verdict, evidence: str, **rest: Any) -> Outcome:
        return make(probe, "16.14", bouncer, Route.TRANSACTION, "psycopg", verdict, evidence, **rest)

    return [
        at("timezone", "1.18.0", Verdict.ISOLATED, "tz stayed"),
        at("timezone", "1.24.1", Verdict.ISOLATED, "tz stayed"),
        at("protocol_prepare", "1.18.0", Verdict.BREAKS, HOSTILE, facts=(Fact.BROKE, Fact.LEAKED)),
        at("protocol_prepare", "1.24.1", Verdict.ISOLATED, "prepared fine"),
        at("rls_tenant", "1.18.0", Verdict.LEAKS, "B read tenant_a's rows", facts=(Fact.LEAKED,), security=True),
        at("rls_tenant", "1.24.1", Verdict.LEAKS, "B read tenant_a's rows", facts=(Fact.LEAKED,), security=True),
        make("timezone", "16.14", "", Route.DIRECT, "psycopg", Verdict.ISOLATED, "direct"),
    ]


def visible_rows(page: Page) -> list[str | None]:
    rows = page.locator("tr[data-testid=row]")
    return [rows.nth(i).get_attribute("data-probe") for i in range(rows.count()) if rows.nth(i).is_visible()]


def test_the_page_filters_rows_shows_a_cells_evidence_and_advice_and_asks_the_network_nothing(
    browser: BrowserContext, tmp_path: Path
) -> None:
    started = time.perf_counter()
    path = tmp_path / "report.html"
    path.write_text(render_html(outcomes()), encoding="utf-8")
    url = path.as_uri()
    page = browser.new_page()
    requests: list[str] = []
    dialogs: list[str] = []
    errors: list[str] = []

    def on_dialog(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("request", lambda request: requests.append(request.url))
    page.on("dialog", on_dialog)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)

    # The cells, as the page shows them.
    cells = page.locator("[data-testid=cell]")
    assert cells.count() == 7
    leak = page.locator('[data-testid=cell][data-probe=rls_tenant][data-column="pgbouncer1.18.0/psycopg"]')
    assert leak.inner_text() == "LEAKS" and leak.get_attribute("data-verdict") == "leaks"
    assert page.locator('[data-testid=cell][data-verdict=breaks]').inner_text() == "BREAKS+leaked"
    assert page.locator("tr[data-probe=rls_tenant] .sec").first.inner_text() == "security"
    assert visible_rows(page) == ["timezone", "protocol_prepare", "rls_tenant", "timezone"]

    # By verdict: without isolated, a row whose every cell is isolated hides (the direct control's too).
    page.locator("[data-testid=verdict-filter-isolated]").uncheck()
    assert visible_rows(page) == ["protocol_prepare", "rls_tenant"]
    assert page.locator("section[data-section=control]").is_hidden()
    page.locator("[data-testid=verdict-filter-isolated]").check()

    # By probe name, then security probes only.
    page.locator("[data-testid=probe-filter]").fill("PREPARE")
    assert visible_rows(page) == ["protocol_prepare"]
    page.locator("[data-testid=probe-filter]").fill("")
    page.locator("[data-testid=security-filter]").check()
    assert visible_rows(page) == ["rls_tenant"]
    page.locator("[data-testid=security-filter]").uncheck()

    # A click shows the cell's evidence (as text, never as markup) and its advice.
    panel = page.locator("[data-testid=details-panel]")
    assert "Click a cell" in panel.inner_text()
    page.locator("[data-testid=cell][data-verdict=breaks]").click()
    assert panel.locator("[data-testid=evidence]").inner_text() == HOSTILE
    advice = panel.locator("[data-testid=advice]").inner_text()
    assert "PgBouncer 1.18.0 cannot track" in advice and "prepare_threshold=None" in advice
    leak.click()
    assert panel.locator("[data-testid=evidence]").inner_text() == "B read tenant_a's rows"
    assert "set_config('app.tenant', ..., true)" in panel.locator("[data-testid=advice]").inner_text()

    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    page.close()
    assert dialogs == [] and errors == []  # the evidence's <script> never ran; the page's own raised nothing
    assert requests == [url]  # the page itself, nothing else
    assert time.perf_counter() - started < 20  # one page, a few interactions


def _dialogs_and_title(browser: BrowserContext, path: Path, text: str) -> tuple[list[str], str, str]:
    """Open `text` as a page: the dialogs it raised, its title, and the panel's text after a cell's click."""
    path.write_text(text, encoding="utf-8")
    page = browser.new_page()
    dialogs: list[str] = []

    def on_dialog(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.goto(path.as_uri())
    page.locator("[data-testid=cell][data-verdict=breaks]").click()
    title, panel = page.title(), page.locator("[data-testid=details-panel]").inner_text()
    page.close()
    return dialogs, title, panel


def test_an_inline_script_slipped_into_the_page_is_refused_while_the_pages_own_runs(
    browser: BrowserContext, tmp_path: Path
) -> None:
    # Escaping keeps evidence from ever becoming markup; the CSP is the second wall, for a script that
    # got in anyway: here one put straight into the page's body.
    page = render_html(outcomes())
    slipped = page.replace("<body>", '<body><script>document.title = "ran"; alert("slipped")</script>', 1)
    dialogs, title, panel = _dialogs_and_title(browser, tmp_path / "slipped.html", slipped)
    assert dialogs == [] and title != "ran"
    assert HOSTILE in panel  # the page's own script ran: the click filled the panel
    # The same page under a policy admitting any inline script runs it: the wall above is the hash.
    open_policy = re.sub(r'content="default-src[^"]*"', "content=\"default-src 'none'; style-src 'unsafe-inline'; "
                         "script-src 'unsafe-inline'\"", slipped, count=1)
    assert open_policy != slipped
    dialogs, title, _ = _dialogs_and_title(browser, tmp_path / "open.html", open_policy)
    assert dialogs == ["slipped"] and title == "ran"


def default_matrix() -> list[Outcome]:
    """The default matrix's shape for one PostgreSQL: 3 PgBouncer releases x 2 drivers, the widest cells."""
    out = []
    for probe in ("temp_table_on_commit_drop", "protocol_prepare", "search_path"):
        for bouncer in ("1.18.0", "1.24.1", "1.26.1"):
            for driver, version in (("asyncpg", "0.32.0"), ("psycopg", "3.3.9")):
                out.append(make(probe, "16.14", bouncer, Route.TRANSACTION, driver, Verdict.BREAKS, "e",
                                driver_version=version, facts=(Fact.BROKE, Fact.LEAKED, Fact.RECOVERED),
                                details=(("b_reported_matches_server", "False"),)))
    return out


def test_at_1280_px_the_default_matrix_s_table_ends_inside_the_viewport_and_left_of_the_panel(
    browser: BrowserContext, tmp_path: Path
) -> None:
    path = tmp_path / "wide.html"
    path.write_text(render_html(default_matrix()), encoding="utf-8")
    page = browser.new_page()
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(path.as_uri())
    table = page.locator("section[data-section=pooled] table").bounding_box()
    section = page.locator("section[data-section=pooled]").bounding_box()
    panel = page.locator("[data-testid=details-panel]").bounding_box()
    assert table is not None and section is not None and panel is not None
    assert table["x"] + table["width"] <= section["x"] + section["width"] + 0.5  # not clipped by its box
    assert table["x"] + table["width"] <= panel["x"] and panel["x"] + panel["width"] <= 1280
    # A detail is named in words, never by its property name.
    page.locator("[data-testid=cell]").first.click()
    text = page.locator("[data-testid=details-panel]").inner_text()
    page.close()
    assert "B's driver was told the server's value" in text and "b_reported_matches_server" not in text
