"""A matplotlib figure as SVG for a self-contained HTML page: reproducible, with tooltips.

Why SVG from matplotlib (docs/reports.md): the plots are matplotlib figures already, and its
SVG backend draws the same figure as vectors with no new dependency and no script. Hover text
is the SVG ``<title>`` element, which every browser shows as a tooltip, added here after the
fact the way matplotlib's own "SVG Tooltip" example does it: an artist is given a ``gid``,
which the backend writes as the ``id`` of its group, and the group (or each marker drawn in
it, in data order) gets a ``<title>``.

What ``figure_svg`` changes in the backend's output, and why:

- no date, and ids hashed from a fixed salt: the same figure gives the same bytes (a rebuilt
  report is identical);
- text as ``<text>`` elements (``svg.fonttype = none``) instead of glyph outlines: smaller,
  selectable, and no glyph ids shared between figures;
- the ``<metadata>`` block (which names matplotlib's web site) and the XML prologue dropped,
  and every id prefixed with the figure's name, so several figures can sit inline in one page
  without two elements sharing an id.
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence

import matplotlib
from matplotlib.figure import Figure

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
ET.register_namespace("", SVG_NS)
ET.register_namespace("xlink", XLINK_NS)

_HREF = f"{{{XLINK_NS}}}href"
_URL_REF = re.compile(r"url\(#([^)]+)\)")
#: The CSS class of a group whose parts carry tooltips (the page highlights them on hover).
TIPS_CLASS = "tips"


def _tag(name: str) -> str:
    return f"{{{SVG_NS}}}{name}"


def _title(text: str) -> ET.Element:
    title = ET.Element(_tag("title"))
    title.text = text
    return title


def _add_tooltips(root: ET.Element, tooltips: Mapping[str, Sequence[str]]) -> None:
    """Give each group named in ``tooltips`` its titles: one title for the whole group, or
    one per marker (``<use>``) in drawing order when there are as many titles as markers.
    A group whose markers do not match its titles in number (the backend skipped a point
    it could not place) keeps one title saying how many points it holds, never a title on
    the wrong point."""
    groups = {g.get("id"): g for g in root.iter(_tag("g")) if g.get("id") in tooltips}
    for gid, texts in tooltips.items():
        group = groups.get(gid)
        if group is None or not texts:
            continue
        group.set("class", TIPS_CLASS)
        if len(texts) == 1:
            group.insert(0, _title(texts[0]))
            continue
        markers = list(group.iter(_tag("use")))
        if len(markers) != len(texts):
            group.insert(0, _title(f"{len(texts)} points (no per-point details)"))
            continue
        for marker, text in zip(markers, texts, strict=True):
            marker.append(_title(text))


def _prefix_ids(root: ET.Element, prefix: str) -> None:
    """Prefix every id and every reference to one (``href="#id"``, ``url(#id)``)."""
    ids = {e.get("id") for e in root.iter() if e.get("id")}
    for element in root.iter():
        for key, value in element.attrib.items():
            if key == "id":
                element.set(key, f"{prefix}{value}")
            elif key == _HREF and value.startswith("#") and value[1:] in ids:
                element.set(key, f"#{prefix}{value[1:]}")
            elif "url(#" in value:
                element.set(key, _URL_REF.sub(
                    lambda m: f"url(#{prefix}{m[1]})" if m[1] in ids else m[0], value))  # fmt: skip


def figure_svg(fig: Figure, name: str, tooltips: Mapping[str, Sequence[str]] | None = None) -> str:
    """``fig`` as one ``<svg>`` element (text, no XML prologue) for inlining in HTML.

    ``name`` (the plot's file stem) prefixes every id; ``tooltips`` maps an artist's ``gid``
    to its hover texts (one for the artist, or one per data point of a marker-only line, in
    data order; see ``_add_tooltips``). Deterministic: the same figure gives the same text.
    """
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "serving-testbed", "svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    root = ET.fromstring(buffer.getvalue())
    for metadata in root.findall(_tag("metadata")):
        root.remove(metadata)
    _add_tooltips(root, tooltips or {})
    _prefix_ids(root, re.sub(r"[^A-Za-z0-9_-]", "-", name) + "-")
    root.set("role", "img")
    return ET.tostring(root, encoding="unicode")
