"""A self-contained HTML page (report.html, compare.html, trend.html) from one Jinja2 template,
reports/templates/page.html.j2: sections of text, interactive charts (reports/plotly_charts.py, drawn by
plotly.js inlined in the page: it opens with no network, from a mail attachment too) and tables
that fit the page (long hashes cut to 12 characters, the whole value on hover; numbers right-aligned).
Escaping is the template engine's, automatic."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from reports.plotly_charts import Chart, Missing

TEMPLATES = Path(__file__).resolve().parent / "templates"
# Shown in full up to this many characters without a space; longer ones (hashes, paths) are cut.
LONGEST_WORD = 40
SHORT = 12
HASH = re.compile(r"^[0-9a-f]{16,}(-dirty)?$")
INLINE_CODE = re.compile(r"`([^`]+)`")
NUMBER = re.compile(r"^[-+x]?\d[\d,]*(\.\d+)?(%| ms| s)?$")


@dataclass
class Cell:
    text: str
    full: str | None = None
    numeric: bool = False


@dataclass
class Section:
    """One section of a page (and of its markdown twin, which draws `images` instead of `charts`)."""

    title: str
    text: list[str] = field(default_factory=list)
    tables: list[tuple[list[str], list[list[str]]]] = field(default_factory=list)
    images: list[tuple[str, bytes]] = field(default_factory=list)
    charts: list[Chart | Missing] = field(default_factory=list)
    # The one-line answer the section opens with, and blocks shown as code (exact configs).
    answer: str | None = None
    code: list[str] = field(default_factory=list)
    # Tables folded under this summary line (long reference facts).
    collapsed: str | None = None

    @property
    def key(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-") or "section"


def view_cell(value: Any) -> Cell:
    text = str(value)
    if HASH.match(text) or (len(text) > LONGEST_WORD and " " not in text):
        return Cell(text[:SHORT] + "…", full=text)
    return Cell(text, numeric=bool(NUMBER.match(text)))


def _plain(value: Any) -> Any:
    """JSON-safe: NaN and infinities become null (JSON.parse takes neither)."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return _plain(value.item())
    return value


@lru_cache(maxsize=1)
def plotly_js() -> str:
    import plotly.offline

    return plotly.offline.get_plotlyjs()


@lru_cache(maxsize=1)
def template():
    import jinja2
    import markupsafe

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, trim_blocks=True)
    # `code` spans of the markdown-shared text lines, escaped first
    env.filters["inline"] = lambda text: markupsafe.Markup(
        INLINE_CODE.sub(r"<code>\1</code>", str(markupsafe.escape(text)))
    )
    return env.get_template("page.html.j2")


def chart_specs(sections: list[Section]) -> dict[str, dict[str, Any]]:
    """Each drawn chart's figure by the id of its place in the page (the template's numbering)."""
    specs = {}
    for section in sections:
        for index, chart in enumerate(section.charts, 1):
            if isinstance(chart, Chart):
                specs[f"chart-{section.key}-{index}"] = {**chart.figure, "domain_filter": chart.domain_filter}
    return specs


def render_page(title: str, subtitle: str, sections: list[Section], domains: list[str] = ()) -> str:
    views = [
        {
            "key": s.key,
            "title": s.title,
            "answer": s.answer,
            "text": s.text,
            "charts": s.charts,
            "code": s.code,
            "collapsed": s.collapsed,
            "tables": [{"header": h, "rows": [[view_cell(c) for c in row] for row in rows]} for h, rows in s.tables],
        }
        for s in sections
    ]
    charts = json.dumps(_plain(chart_specs(sections)), separators=(",", ":")).replace("</", "<\\/")
    return template().render(
        title=title,
        subtitle=subtitle,
        sections=views,
        domains=list(domains),
        plotly_js=plotly_js(),
        charts_json=charts,
    )
