"""Write kvlab's report: one self-contained, offline HTML page of altair charts.

``write_report(path, aggregates=..., requests=..., provenance=..., scenario=...)`` assembles
the sections of ``pipeline/charts/`` (one module per section: the chart and its caption):
the GPU cliff, the CPU cliff, a GPU x CPU heatmap, a per-pass tier breakdown, measured TTFT
per request, baseline/lmcache TTFT ratios, predicted TTFT and the provenance of the measured
file. Every caption states its finding with numbers computed from the inputs. The page
(``pipeline.charts.page_html``) inlines its libraries, fetches nothing and is written
atomically (temporary file + ``os.replace``).
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from kvlab.summarize import atomic_output
from pipeline.charts import Section, breakdown, cpu_cliff, gpu_cliff, heatmap, page_html
from pipeline.charts import predicted as predicted_section
from pipeline.charts import ratio, ttft
from pipeline.charts.provenance import provenance_block
from pipeline.sweeps import AGGREGATE_SCHEMA, SWEEPS

__all__ = ["write_report", "render_html", "build_sections", "REQUEST_COLUMNS"]

REQUEST_COLUMNS = ("config", "pass", "doc", "ttft_ms", "tier", "request", "line")


def _check_inputs(aggregates: pl.DataFrame, requests: pl.DataFrame) -> None:
    """Raise ValueError when a column or a sweep the report needs is missing."""
    missing = [c for c in AGGREGATE_SCHEMA if c not in aggregates.columns]
    missing += [f"requests.{c}" for c in REQUEST_COLUMNS if c not in requests.columns]
    if missing:
        raise ValueError(f"report inputs lack column(s): {', '.join(missing)}")
    present = set(aggregates.get_column("sweep").unique().to_list())
    absent = [s for s in SWEEPS if s not in present]
    if absent:
        raise ValueError(f"aggregates lack sweep(s): {', '.join(absent)}")


def build_sections(aggregates: pl.DataFrame, requests: pl.DataFrame, scenario: dict,
                   predicted: pl.DataFrame | None = None, latencies: dict | None = None
                   ) -> tuple[list[Section], list[Section]]:
    """(simulator sections, measured sections), each chart with its caption."""
    simulated = [module.section(aggregates, scenario)
                 for module in (gpu_cliff, cpu_cliff, heatmap, breakdown)]
    measured = [ttft.section(requests)] if not requests.is_empty() else []
    measured.append(ratio.section(requests))
    if predicted is not None:
        measured.append(predicted_section.section(predicted, latencies or {}, scenario))
    return simulated, [section for section in measured if section is not None]


def render_html(aggregates: pl.DataFrame, requests: pl.DataFrame, provenance: dict,
                scenario: dict, predicted: pl.DataFrame | None = None,
                latencies: dict | None = None) -> str:
    """The whole report page as one HTML string, libraries inlined."""
    _check_inputs(aggregates, requests)
    simulated, measured = build_sections(aggregates, requests, scenario, predicted, latencies)
    passes = ", ".join(scenario["passes"])
    lede = (f"kvlab simulates {scenario['docs']} documents of {scenario['tokens']} tokens "
            f"reused as prompt prefixes, read in passes {passes} through a GPU LRU KV cache "
            f"optionally backed by a CPU tier, and compares the predicted tiers with "
            f"measured time to first token.")
    return page_html("kvlab report", lede, [
        ("Simulated cache", "", simulated),
        ("Measured TTFT", provenance_block(provenance), measured)])


def write_report(path: str | os.PathLike, *, aggregates: pl.DataFrame,
                 requests: pl.DataFrame, provenance: dict, scenario: dict,
                 predicted: pl.DataFrame | None = None, latencies: dict | None = None) -> Path:
    """Write the self-contained HTML report to ``path`` atomically; return the path.

    ``predicted`` (aggregates plus ``predicted_ttft_ms``) and ``latencies`` (see
    ``pipeline.latency``) add the predicted-TTFT chart.
    """
    target = Path(path)
    text = render_html(aggregates, requests, provenance, scenario, predicted, latencies)
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(target) as handle:
        handle.write(text)
    return target
