"""analysis.svg and analysis.plots' hover texts: titles on the right points, ids unique per
figure, the same bytes for the same figure, and a long series thinned to MAX_TIPS texts."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from analysis.plots import MAX_TIPS, tipped_points
from analysis.svg import figure_svg

SVG = "{http://www.w3.org/2000/svg}"


def _data_markers(svg: str) -> list[ET.Element]:
    """The markers outside the axes' ticks (which matplotlib draws as markers too)."""
    root = ET.fromstring(svg)
    ticks = {
        id(u)
        for g in root.iter(f"{SVG}g")
        if "tick" in g.get("id", "")
        for u in g.iter(f"{SVG}use")
    }
    return [u for u in root.iter(f"{SVG}use") if id(u) not in ticks]


def test_each_point_gets_its_own_title_in_data_order() -> None:
    fig, ax = plt.subplots()
    tips: dict[str, list[str]] = {}
    tipped_points(ax, [1.0, 2.0, 3.0], [3.0, 1.0, 2.0], ["a", "b", "c"], "pts", tips, marker="o")
    svg = figure_svg(fig, "demo", tips)
    plt.close(fig)
    markers = _data_markers(svg)
    assert [m.find(f"{SVG}title").text for m in markers] == ["a", "b", "c"]  # type: ignore[union-attr]
    # Data y 3, 1, 2: the SVG's y grows downwards, so a's marker is highest (smallest y).
    ys = [float(m.get("y", "nan")) for m in markers]
    assert ys[0] < ys[2] < ys[1]
    assert 'id="demo-pts" class="tips"' in svg


def test_ids_are_prefixed_so_two_figures_share_none_and_bytes_repeat() -> None:
    def draw(name: str) -> str:
        fig, ax = plt.subplots()
        ax.plot([0, 1], [0, 1], marker="o")
        svg = figure_svg(fig, name)
        plt.close(fig)
        return svg

    one, two = draw("one"), draw("two")
    ids_one = set(re.findall(r' id="([^"]+)"', one))
    ids_two = set(re.findall(r' id="([^"]+)"', two))
    assert ids_one and not ids_one & ids_two
    assert all(i.startswith("one-") for i in ids_one)
    # Every reference points at an id of its own figure.
    refs = re.findall(r'(?:href="#|url\(#)([^")]+)', one)
    assert refs and set(refs) <= ids_one
    assert "<metadata" not in one and "<?xml" not in one and "http://purl" not in one
    assert draw("one") == one


def test_a_long_series_is_drawn_whole_with_every_kth_point_titled() -> None:
    n = 2 * MAX_TIPS + 500  # step 3: points 0, 3, 6, … get a title
    fig, ax = plt.subplots()
    tips: dict[str, list[str]] = {}
    x = [float(i) for i in range(n)]
    tipped_points(ax, x, x, [f"p{i}" for i in range(n)], "many", tips, marker="o")
    svg = figure_svg(fig, "long", tips)
    plt.close(fig)
    titles = re.findall(r"<title>([^<]*)</title>", svg)
    assert len(titles) == -(-n // 3) and titles[:3] == ["p0", "p3", "p6"]
    assert len(_data_markers(svg)) == n


def test_titles_that_do_not_match_the_markers_are_not_put_on_wrong_points() -> None:
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [1, 2, 3], "o", gid="pts")
    svg = figure_svg(fig, "odd", {"pts": ["only", "two"]})
    plt.close(fig)
    assert re.findall(r"<title>([^<]*)</title>", svg) == ["2 points (no per-point details)"]
