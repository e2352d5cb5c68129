"""The HTML page's inline style and script, and its CSP, which admits those two by hash and nothing else."""

from __future__ import annotations

import base64
import hashlib

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1rem 1.5rem; color: #1b1f24; background: #fff; }
h1 { font-size: 1.4rem; margin: 0 0 .3rem; }
h2 { font-size: 1.1rem; margin: 1.2rem 0 .4rem; }
.filters { display: flex; flex-wrap: wrap; gap: .6rem 1.2rem; align-items: center; margin: .8rem 0;
  padding: .5rem .7rem; background: #f4f6f8; border-radius: 6px; }
.filters fieldset { border: 0; margin: 0; padding: 0; display: flex; gap: .5rem; flex-wrap: wrap; }
.filters legend { float: left; margin-right: .4rem; font-weight: 600; }
.layout { display: flex; gap: 1.2rem; align-items: flex-start; }
.tables { flex: 1 1 auto; min-width: 0; }
.tables section { overflow-x: auto; }
#panel { flex: 0 0 20rem; max-width: 30%; position: sticky; top: 1rem; max-height: 90vh; overflow: auto;
  border: 1px solid #d0d7de; border-radius: 6px; padding: .6rem .8rem; background: #fafbfc; }
table { border-collapse: collapse; margin-bottom: .4rem; }
th, td { border: 1px solid #d0d7de; padding: .2rem .45rem; text-align: left; vertical-align: top; }
thead th { background: #f4f6f8; font-weight: 600; font-size: .8rem; max-width: 8rem; }
tbody th { font-weight: 500; white-space: nowrap; font-size: .85rem; }
td.cell { cursor: pointer; font-family: ui-monospace, monospace; font-size: .8rem; }
td.cell:focus, td.cell.selected { outline: 2px solid #0969da; outline-offset: -2px; }
td.dim { opacity: .25; }
td.missing { color: #8c959f; text-align: center; }
.sec { display: inline-block; margin-left: .35rem; padding: 0 .3rem; border-radius: 3px; font-size: .75rem;
  background: #6f42c1; color: #fff; }
.v-isolated { background: #dafbe1; }
.v-leaks { background: #ffd7d5; color: #82071e; font-weight: 700; }
.v-lost { background: #fff1c2; color: #7d4e00; font-weight: 700; }
.v-breaks { background: #f3d9fa; color: #6e1a8a; font-weight: 700; }
.v-loses_writes { background: #6e1a8a; color: #ffffff; font-weight: 700; }
.v-error { background: #a40e26; color: #fff; font-weight: 700; }
.v-not_applicable, .v-skipped { background: #eaeef2; color: #57606a; }
pre { white-space: pre-wrap; word-break: break-word; background: #f6f8fa; padding: .5rem; border-radius: 4px; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .1rem .6rem; margin: .3rem 0; }
dt { font-weight: 600; }
#panel h3 { overflow-wrap: anywhere; }
dd { margin: 0; }
.legend dd span { padding: 0 .3rem; border-radius: 3px; }
[hidden] { display: none !important; }
"""

JS = """
(function () {
  "use strict";
  var probeBox = document.getElementById("probe-filter");
  var securityBox = document.getElementById("security-filter");
  var verdictBoxes = Array.prototype.slice.call(document.querySelectorAll("input[data-verdict-filter]"));
  var panel = document.getElementById("panel");

  function apply() {
    var text = probeBox.value.trim().toLowerCase();
    var on = {};
    verdictBoxes.forEach(function (box) { on[box.value] = box.checked; });
    document.querySelectorAll("tr[data-probe]").forEach(function (row) {
      var any = false;
      row.querySelectorAll("td[data-verdict]").forEach(function (cell) {
        var shown = on[cell.getAttribute("data-verdict")] === true;
        cell.classList.toggle("dim", !shown);
        any = any || shown;
      });
      var named = row.getAttribute("data-probe").toLowerCase().indexOf(text) !== -1;
      var secure = !securityBox.checked || row.getAttribute("data-security") === "true";
      row.hidden = !(named && secure && any);
    });
    document.querySelectorAll("section[data-grid]").forEach(function (section) {
      section.hidden = section.querySelector("tr[data-probe]:not([hidden])") === null;
    });
  }

  function show(cell) {
    var source = document.getElementById(cell.getAttribute("data-detail"));
    if (source === null) { return; }
    var copy = source.cloneNode(true);
    copy.removeAttribute("id");
    copy.hidden = false;
    panel.replaceChildren(copy);
    document.querySelectorAll("td.selected").forEach(function (c) { c.classList.remove("selected"); });
    cell.classList.add("selected");
  }

  document.addEventListener("click", function (event) {
    var cell = event.target.closest("td[data-detail]");
    if (cell !== null) { show(cell); }
  });
  document.addEventListener("keydown", function (event) {
    var cell = event.target.closest ? event.target.closest("td[data-detail]") : null;
    if (cell !== null && (event.key === "Enter" || event.key === " ")) { event.preventDefault(); show(cell); }
  });
  probeBox.addEventListener("input", apply);
  securityBox.addEventListener("change", apply);
  verdictBoxes.forEach(function (box) { box.addEventListener("change", apply); });
  apply();
})();
"""


def csp_hash(text: str) -> str:
    """A CSP source that admits the one inline element whose text is exactly `text`."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


#: Admits only the style and the script above, by their hashes: no request can leave the page, and
#: no other inline script runs (evidence is escaped; were it not, this is the second wall).
CSP = (f"default-src 'none'; style-src {csp_hash(CSS)}; script-src {csp_hash(JS)}; base-uri 'none'; "
       "form-action 'none'")
