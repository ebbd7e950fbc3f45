"""Report sections: each chart with its one-sentence caption, and the page that holds them.

A section module offers functions that return ``Section`` objects; ``page_html`` puts
sections under headings into one self-contained HTML page (Vega, Vega-Lite and vega-embed
inlined, so it renders offline).
"""

from __future__ import annotations

import contextlib
import html
import json
import os
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path

import altair as alt
import vl_convert as vlc

from kvlab.summarize import atomic_output

__all__ = ["Chart", "Section", "page_html", "javascript_bundle"]

Chart = alt.Chart | alt.LayerChart | alt.FacetChart | alt.HConcatChart | alt.VConcatChart


@dataclass(frozen=True)
class Section:
    """One chart of the report: its container id, the chart and its one-sentence finding."""

    key: str
    chart: Chart
    caption: str

    @cached_property
    def spec(self) -> dict:
        """The chart's Vega-Lite spec, every row inlined and validated; built once (a
        section drawn once serves every page that shows it)."""
        with alt.data_transformers.enable("default", max_rows=None):
            return self.chart.to_dict()


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #222;
       margin: 0; background: #fafafa; }
main { max-width: 1000px; margin: 0 auto; padding: 24px 32px 48px; background: white; }
h1 { margin-bottom: 4px; } h2 { margin-top: 36px; border-bottom: 1px solid #ddd; }
.lede { color: #444; font-size: 1.05em; }
figure { margin: 20px 0 28px; }
figcaption { font-size: 1.05em; margin-top: 6px; color: #333; max-width: 820px; }
.chart { min-height: 120px; }
.provenance { padding: 8px 14px; border-radius: 6px; border-left: 6px solid; }
.provenance.synthetic { background: #fff4e5; border-color: #e65100; }
.provenance.real { background: #e8f5e9; border-color: #2e7d32; }
.provenance p { margin: 6px 0; } code { word-break: break-all; }
.summary { background: #f4f6f8; border-radius: 6px; padding: 10px 16px; }
.summary dl { display: grid; grid-template-columns: max-content 1fr; gap: 3px 16px;
              margin: 4px 0 10px; font-size: 0.92em; }
.summary dt { font-weight: 600; color: #333; } .summary dd { margin: 0; }
.wide { overflow-x: auto; }
table.points { border-collapse: collapse; font-size: 0.88em; margin: 6px 0 12px; }
table.points th, table.points td { padding: 2px 6px; text-align: right;
                                   border-bottom: 1px solid #e3e3e3; white-space: nowrap; }
table.points th:first-child, table.points td:first-child { text-align: left; }
.summary table.points { font-size: 0.84em; }
"""


def _figure(section: Section) -> str:
    """A chart container and its caption."""
    return (f'<figure><div class="chart" id="chart-{section.key}"></div>'
            f"<figcaption>{html.escape(section.caption)}</figcaption></figure>")


def _script_json(value: object) -> str:
    """JSON that is safe inside a <script> element."""
    return (json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("&", "\\u0026"))


def _embed_script(sections: list[Section]) -> str:
    """One script that renders every chart into its container with vega-embed."""
    specs = {f"#chart-{s.key}": s.spec for s in sections}
    options = {"mode": "vega-lite", "renderer": "svg", "actions": False}
    return (f"const kvlabSpecs = {_script_json(specs)};\n"
            f"const kvlabOptions = {_script_json(options)};\n"
            "for (const [target, spec] of Object.entries(kvlabSpecs)) {\n"
            "  vegaEmbed(target, spec, kvlabOptions).catch(console.error);\n}\n")


def bundle_cache_path() -> Path:
    """Where the built bundle is kept between runs: ``$XDG_CACHE_HOME/kvlab`` (default
    ``~/.cache/kvlab``), one file per vl-convert and Vega-Lite version."""
    vl_version = "_".join(alt.SCHEMA_VERSION.split(".")[:2])          # "v6.4.1" -> "v6_4"
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvlab"
    return root / f"vega-bundle-vlconvert{vlc.__version__}-{vl_version}.js"


@cache
def javascript_bundle() -> str:
    """vega-embed, Vega-Lite (altair's version) and Vega as one inline-safe script.

    Building it takes vl-convert about 2.5 s, a large part of a run, so it is built once per
    version and kept in ``bundle_cache_path()`` (written atomically; an unreadable or
    unwritable cache only means building it again)."""
    try:
        path: Path | None = bundle_cache_path()
    except (RuntimeError, KeyError):                  # no home folder to cache in
        path = None
    with contextlib.suppress(OSError, UnicodeDecodeError, AttributeError):
        text = path.read_text(encoding="utf-8")
        if text.endswith(_BUNDLE_END):
            return text[:-len(_BUNDLE_END)]
    vl_version = "_".join(alt.SCHEMA_VERSION.split(".")[:2])
    text = vlc.javascript_bundle(vl_version=vl_version).replace("</script", "<\\/script")
    with contextlib.suppress(OSError, AttributeError):
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(path) as handle:
            handle.write(text + _BUNDLE_END)
    return text


#: Appended to the cached bundle: a file without it is incomplete and is rebuilt.
_BUNDLE_END = "\n// kvlab: end of bundle\n"


def page_html(title: str, lede: str, groups: list[tuple[str, str, list[Section]]]) -> str:
    """A whole page: ``groups`` of (heading, HTML shown under it, sections)."""
    body = []
    for heading, prelude, sections in groups:
        body += [f"<h2>{html.escape(heading)}</h2>", prelude, *map(_figure, sections)]
    every = [section for _, _, sections in groups for section in sections]
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>", f"<style>{STYLE}</style>",
        f"<script>\n{javascript_bundle()}\n</script>", "</head>", "<body><main>",
        f"<h1>{html.escape(title)}</h1>", f'<p class="lede">{html.escape(lede)}</p>',
        *body, "</main>", f"<script>\n{_embed_script(every)}</script>",
        "</body>", "</html>", ""])
