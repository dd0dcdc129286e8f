"""The page shell and the plot helpers: escaping, scales, placeholders, no network."""

import re

import pytest

from trainpace.report.html import (
    bar_chart,
    bullets,
    empty_chart,
    esc,
    page,
    section,
    table,
    tick_label,
    write_page,
)
from trainpace.report.plot_frame import nice_ticks
from trainpace.report.plots import HLine, Series, line_chart, stacked_chart

EVIL = '<script>alert("x")</script>&'


def test_everything_given_as_text_is_escaped():
    doc = page(EVIL, section(EVIL, table([EVIL], [[EVIL]]), bullets([EVIL])), subtitle=EVIL)
    doc += line_chart([Series(EVIL, [0, 1], [1, 2])], title=EVIL, x_label=EVIL, y_label=EVIL,
                      hlines=[HLine(1.5, EVIL)])
    doc += bar_chart([EVIL], [1.0], title=EVIL) + empty_chart(EVIL, EVIL)
    assert "<script>" not in doc
    assert doc.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;") >= 10


def test_raw_columns_are_the_only_unescaped_cells():
    html = table(["a", "b"], [["<b>x</b>", "<b>y</b>"]], raw=[0], numeric=[1])
    assert "<td><b>x</b></td>" in html
    assert '<td class="num">&lt;b&gt;y&lt;/b&gt;</td>' in html


def test_the_page_reaches_for_nothing_outside_itself():
    doc = page("t", section("s", line_chart([Series("a", [0, 1, 2], [1, None, 3])], title="c",
                                            x_label="x", y_label="y")))
    assert not re.search(r"""(src|href)\s*=|@import|url\(|<script|<link""", doc)
    assert re.findall(r"https?://[^\s\"']+", doc) == ["http://www.w3.org/2000/svg"]  # a namespace, not a fetch


@pytest.mark.parametrize(("lo", "hi", "ticks"), [
    (0.0, 1.0, [0.0, 0.25, 0.5, 0.75, 1.0]),
    (0.0, 97.0, [0.0, 25.0, 50.0, 75.0]),
    (0.5, 2.0, [0.5, 1.0, 1.5, 2.0]),
    (3.0, 3.0, [3.0]),
])
def test_nice_ticks(lo, hi, ticks):
    assert nice_ticks(lo, hi) == ticks


def test_tick_labels():
    assert [tick_label(v) for v in (0.25, 12.0, 3400.0, 1.2e6, 2e9)] == ["0.25", "12", "3.4k", "1.2M", "2G"]


def test_line_chart_breaks_lines_at_missing_points_and_draws_targets():
    svg = line_chart([Series("loss", [0, 1, 2, 3, 4], [4, 3, None, 2, 1])], title="t",
                     x_label="x", y_label="y", hlines=[HLine(1.5, "target 1.5")])
    assert svg.count("<polyline") == 2
    assert "target 1.5" in svg
    assert 'stroke-dasharray="6 4"' in svg


def test_a_lone_point_is_drawn_as_a_dot():
    svg = line_chart([Series("a", [0, 1, 2], [None, 5, None])], title="t", x_label="x", y_label="y")
    assert svg.count("<circle") == 1
    assert "<polyline" not in svg


def test_empty_data_gives_a_placeholder_that_says_so():
    svg = line_chart([Series("a", [], [])], title="Loss", x_label="x", y_label="y")
    assert "no data recorded for this plot" in svg
    assert "no data recorded" in stacked_chart([], [], title="t", x_label="x", y_label="y")
    assert "nothing to show" in bar_chart([], [], title="t")


def test_stacked_chart_stacks_layers_from_the_bottom():
    xs = [0.0, 1.0]
    svg = stacked_chart(xs, [Series("a", xs, [1.0, 1.0]), Series("b", xs, [2.0, None])],
                        title="t", x_label="x", y_label="y", width=200, height=140)
    polygons = re.findall(r'<polygon points="([^"]+)"', svg)
    assert len(polygons) == 2
    # the second layer's lower edge is the first layer's upper edge
    first_top = polygons[0].split()[:2]
    second_bottom = polygons[1].split()[2:]
    assert sorted(first_top) == sorted(second_bottom)


def test_bar_chart_scales_to_the_largest_value():
    svg = bar_chart(["a", "b"], [2.0, 1.0], title="t", unit=" ms", width=400)
    widths = [float(w) for w in re.findall(r'<rect x="[^"]+" y="[^"]+" width="([^"]+)"', svg)]
    assert widths[0] == pytest.approx(2 * widths[1], abs=0.2)
    assert "2 ms" in svg and "1 ms" in svg


def test_write_page_is_utf8(tmp_path):
    path = write_page(tmp_path / "r.html", page("µs °C —"))
    assert "µs °C —" in path.read_text(encoding="utf-8")


def test_esc_quotes_attributes():
    assert esc('a"b\'c') == "a&quot;b&#x27;c"
