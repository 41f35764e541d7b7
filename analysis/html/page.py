"""The shell every HTML page of a run or comparison shares: one self-contained file.

A page holds its style, its one small script (sortable tables) and its figures (inline SVG,
``analysis.svg``); it loads nothing: its Content-Security-Policy allows no source at all
except its own inline style and the script whose hash it names, so a page that tried to
fetch anything would be refused by the browser and say so in its console.

Text comes from the same Markdown as report.md and compare.md, turned into HTML by
markdown-it-py (CommonMark plus tables; raw HTML, links and images off, so text from a run,
such as an error message, can only ever be text). Nothing here computes a figure.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections.abc import Sequence

from markdown_it import MarkdownIt

_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")
_MARKDOWN.disable(["autolink", "link", "image"])

STYLE = """
:root { --pass: #1a7f37; --fail: #cf222e; --undecided: #9a6700; --line: #d0d7de;
        --muted: #57606a; --band: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", "DejaVu Sans",
       sans-serif; color: #1f2328; background: #fff; }
main { max-width: 1280px; margin: 0 auto; padding: 24px 28px 64px; }
h1 { font-size: 28px; margin: 4px 0 6px; }
h2 { font-size: 21px; margin: 36px 0 10px; padding-top: 8px; border-top: 1px solid var(--line); }
h3 { font-size: 17px; margin: 24px 0 8px; }
.kicker { color: var(--muted); margin: 0; font-size: 13px; }
.lede { color: var(--muted); margin: 0 0 14px; max-width: 900px; }
.headline { font-size: 20px; padding: 12px 16px; border-radius: 6px; border-left: 6px solid;
            background: var(--band); margin: 12px 0 8px; }
.headline.pass { border-color: var(--pass); }
.headline.fail { border-color: var(--fail); }
.headline.undecided { border-color: var(--undecided); }
.headline .why { display: block; font-size: 15px; color: var(--muted); margin-top: 4px; }
.mark { font-weight: 700; white-space: nowrap; }
.mark.pass, tr.pass .mark { color: var(--pass); }
.mark.fail, tr.fail .mark { color: var(--fail); }
.mark.undecided, tr.undecided .mark { color: var(--undecided); }
nav.toc { margin: 18px 0 0; font-size: 14px; }
nav.toc a { margin-right: 14px; color: #0969da; text-decoration: none; }
.scroll { overflow-x: auto; margin: 8px 0 16px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0 16px; }
th, td { border: 1px solid var(--line); padding: 4px 8px; vertical-align: top; }
th { background: var(--band); text-align: left; cursor: pointer; user-select: none;
     position: sticky; top: 0; }
th[aria-sort="ascending"]::after { content: " \\25B2"; color: var(--muted); }
th[aria-sort="descending"]::after { content: " \\25BC"; color: var(--muted); }
tbody tr:nth-child(even) td { background: #fbfcfd; }
td { font-variant-numeric: tabular-nums; }
code { background: var(--band); padding: 1px 4px; border-radius: 4px; font-size: 90%;
       overflow-wrap: anywhere; }
figure { margin: 12px 0 24px; }
figure .plot svg { max-width: 100%; height: auto; display: block; }
figcaption { color: var(--muted); font-size: 13px; }
.tips use:hover, .tips path:hover { filter: drop-shadow(0 0 2px #000); }
details > summary { cursor: pointer; color: var(--muted); }
footer { color: var(--muted); font-size: 12px; margin-top: 48px; }
"""

#: Sorts a table by the clicked header: numbers as numbers (a leading ≥, ≤ or > and a
#: trailing unit ignored), text as text, empty and "–" cells last either way.
SCRIPT = """
(function () {
  function key(text) {
    var t = text.trim().replace(/\\u2212/g, "-").replace(/^[\\u2265\\u2264>]\\s*/, "");
    var m = /^[-+]?\\d+(\\.\\d+)?(e[-+]?\\d+)?/i.exec(t.replace(/,/g, ""));
    if (t === "" || t === "\\u2013") { return { empty: true }; }
    return m ? { num: parseFloat(m[0]) } : { text: t };
  }
  function compare(a, b) {
    if (a.empty || b.empty) { return a.empty === b.empty ? 0 : (a.empty ? 1 : -1); }
    if (a.num !== undefined && b.num !== undefined) { return a.num - b.num; }
    if (a.num !== undefined) { return -1; }
    if (b.num !== undefined) { return 1; }
    return a.text.localeCompare(b.text);
  }
  function sortBy(table, col, th) {
    var body = table.tBodies[0];
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    var rows = Array.prototype.slice.call(body.rows).map(function (row) {
      var cell = row.cells[col];
      return { row: row, key: key(cell ? cell.textContent : "") };
    });
    rows.sort(function (a, b) {
      if (a.key.empty || b.key.empty) { return compare(a.key, b.key); }
      return dir * compare(a.key, b.key);
    });
    rows.forEach(function (r) { body.appendChild(r.row); });
    Array.prototype.forEach.call(th.parentNode.cells, function (c) {
      c.removeAttribute("aria-sort");
    });
    th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
  }
  Array.prototype.forEach.call(document.querySelectorAll("table"), function (table) {
    if (!table.tHead || !table.tBodies.length) { return; }
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.title = "sort by this column";
      th.tabIndex = 0;
      th.addEventListener("click", function () { sortBy(table, col, th); });
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter") { sortBy(table, col, th); }
      });
    });
  });
})();
"""


def _script_hash(script: str) -> str:
    digest = hashlib.sha256(script.encode()).digest()
    return "sha256-" + base64.b64encode(digest).decode()


#: No source of any kind but the page's own style and its one script.
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    f"script-src '{_script_hash(SCRIPT)}'; base-uri 'none'; form-action 'none'"
)


def esc(text: object) -> str:
    """``text`` as HTML text (quotes escaped too, so it is safe in an attribute)."""
    return html.escape(str(text), quote=True)


def markdown_html(lines: Sequence[str]) -> str:
    """Markdown lines as HTML (wide tables scroll inside their own box)."""
    out = _MARKDOWN.render("\n".join(lines))
    return out.replace("<table>", '<div class="scroll"><table>').replace(
        "</table>", "</table></div>"
    )


def anchor(text: str) -> str:
    """An id for ``text`` (letters, digits, ``-`` and ``_`` kept; the rest ``-``)."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", text)


def figure(name: str, svg: str | None, caption: str) -> str:
    """One figure: its inline SVG (or a line saying it is missing) and its caption."""
    body = svg if svg is not None else f"<p>(figure {esc(name)} missing)</p>"
    return (
        f'<figure id="fig-{anchor(name)}"><div class="plot">{body}</div>'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def page(title: str, body: str) -> str:
    """The whole HTML document around ``body``."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        f"<title>{esc(title)}</title>\n"
        '<link rel="icon" href="data:,">\n'
        f"<style>{STYLE}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n"
        f"<script>{SCRIPT}</script>\n</body>\n</html>\n"
    )
