"""Write kvlab's report: one self-contained, offline HTML page of altair charts.

``write_report(path, aggregates=..., requests=..., provenance=..., scenario=...)`` assembles
the sections of ``pipeline/charts/`` (one module per section: the chart and its caption):
the GPU cliff, the CPU cliff, a GPU x CPU heatmap, a per-pass tier breakdown, measured TTFT
per request, baseline/lmcache TTFT ratios, predicted TTFT and the provenance of the measured
file. Every caption states its finding with numbers computed from the inputs. The page
(``pipeline.charts.page_html``) inlines its libraries, fetches nothing and is written
atomically (temporary file + ``os.replace``).

``run`` adds more groups, built here (``render_html``'s ``measured_extra`` and
``extra_groups``): the fitted TTFT model, the real engine, block mode, the policies and the
trace report.

The report renders the frames it is given: it runs no model and reads no file (``run``'s
stages compute every frame, ``pipeline.commands.run_blocks.report_inputs``).
"""

from __future__ import annotations

import html
import os
from pathlib import Path

import polars as pl

from kvlab.summarize import atomic_output
from pipeline.charts import Section, breakdown, cpu_cliff, gpu_cliff, heatmap, page_html
from pipeline.charts import predicted as predicted_section
from pipeline.charts import ratio, ttft
from pipeline.charts.provenance import provenance_block
from pipeline.sweeps import AGGREGATE_SCHEMA, SWEEPS

__all__ = ["write_report", "render_html", "build_sections", "REQUEST_COLUMNS", "Group",
           "block_group", "engine_sections", "policy_group", "plan_sections",
           "real_engine_group", "fitted_engine_group", "trace_group"]

#: A page group: (heading, HTML shown under it, sections).
Group = tuple[str, str, list[Section]]

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


#: The simulator's sections: (id, chart, caption), each a function of (aggregates, scenario).
SIMULATED = (("gpu-cliff", gpu_cliff.gpu_cliff_chart, gpu_cliff.gpu_cliff_caption),
             ("cpu-cliff", cpu_cliff.cpu_cliff_chart, cpu_cliff.cpu_cliff_caption),
             ("grid", heatmap.heatmap_chart, heatmap.heatmap_caption),
             ("tiers", breakdown.breakdown_chart, breakdown.breakdown_caption))


def build_sections(aggregates: pl.DataFrame, requests: pl.DataFrame, scenario: dict,
                   predicted: pl.DataFrame | None = None, latencies: dict | None = None
                   ) -> tuple[list[Section], list[Section]]:
    """(simulator sections, measured sections), each chart with its caption."""
    simulated = [Section(key, chart(aggregates, scenario), caption(aggregates, scenario))
                 for key, chart, caption in SIMULATED]
    measured = [ttft.section(requests)] if not requests.is_empty() else []
    measured.append(ratio.section(requests))
    if predicted is not None:
        measured.append(predicted_section.section(predicted, latencies or {}, scenario))
    return simulated, [section for section in measured if section is not None]


def plan_sections(fit_predicted: pl.DataFrame, residuals: pl.DataFrame) -> list[Section]:
    """The fitted TTFT model (``pipeline.commands.run_blocks.ttft_fit``): predicted p50 TTFT per pass
    along the GPU and the CPU cliff, and measured vs predicted per (config, pass)."""
    from pipeline.charts import plan
    return [plan.sweep_ttft_section(fit_predicted, "gpu_cliff"),
            plan.sweep_ttft_section(fit_predicted, "cpu_cliff"), plan.fit_section(residuals)]


def real_engine_group(joined: pl.DataFrame, path: str | os.PathLike) -> Group:
    """The committed llama.cpp measurement (``joined``: ``pipeline.measure.llamacpp.compare.
    load_measurement`` of ``path``, ``data/measured/llamacpp_lab.jsonl``), placed right after
    the synthetic stand-in: measured vs predicted tiers and its TTFT."""
    from pipeline.charts import real_engine
    prelude = (f"<p>A REAL measurement next to the synthetic stand-in above: llama.cpp's "
               f"server with its RAM prompt cache on this machine, the lab's experiment "
               f"({html.escape(Path(path).name)}; provenance beside it; <code>python -m "
               f"pipeline measure --local-engine</code>).</p>")
    return ("Measured TTFT: a real engine (llama.cpp)", prelude, real_engine.sections(joined))


def fitted_engine_group(frame: pl.DataFrame, provenance: dict[str, str],
                        holdout: tuple[pl.DataFrame, dict[str, str]] | None = None) -> Group:
    """Measured against predicted TTFT per request of a real engine under its fitted
    step-time model (``frame``: ``pipeline.fit.per_request.fitted_requests``' frame of the
    committed fit; ``provenance``: its labels; ``holdout``: the same for a fit that held
    requests out, drawn beside it), after the real engine's measurement."""
    from pipeline.charts import fitted_ttft
    held = None if holdout is None else (holdout[0], holdout[1].get("in_sample", ""))
    return ("Measured vs predicted TTFT per request: llama.cpp, fitted step time",
            fitted_ttft.provenance_html(provenance, None if holdout is None else holdout[1]),
            fitted_ttft.page_sections(frame, provenance.get("in_sample", ""), held))


def block_group(aggregates: pl.DataFrame, scenario: dict, note: str = "",
                engines: tuple[pl.DataFrame, pl.DataFrame] | None = None,
                extra: list[Section] = ()) -> Group:
    """Block mode: tail-first vs head-first (``block_sections``: ``aggregates`` of the block-lru
    model in both orders, ``scenario`` with docs, tokens, block_size, cpu_sweep_gpu), then
    ``extra`` (a run's own engine models), then with ``engines`` (GPU and CPU curves of
    ``pipeline.blocks.engine_curves``), block-lru vs vllm and
    LMCache's chunk-level CPU cliff (the lab's workload)."""
    from pipeline.charts import blocks
    prelude = (f"<p>Engines cache fixed-size blocks and reuse a request's longest cached "
               f"prefix (<code>python -m pipeline blocks</code>): {scenario['docs']} documents "
               f"x {scenario['tokens']} tokens in {scenario['block_size']}-token blocks. "
               f"{html.escape(note)}</p>")
    sections = [*blocks.block_sections(aggregates, scenario), *extra]
    if engines is not None:
        sections += engine_sections(engines)
    return ("Block mode", prelude, sections)


def engine_sections(engines: tuple[pl.DataFrame, pl.DataFrame]) -> list[Section]:
    """Ideal vs vllm on the GPU and LMCache's chunk-level CPU cliff (``engines``: GPU and CPU
    curves of ``pipeline.blocks.engine_curves``), the lab's workload."""
    from pipeline.charts import engines as engine_charts
    return engine_charts.lab_engine_sections(*engines)


def policy_group(lab_curves: pl.DataFrame) -> Group:
    """Hit ratio per cache policy on the lab's workload (``lab_curves``:
    ``pipeline.blocks.policy_curves.lab_curves``), OPT as the ceiling."""
    from pipeline.charts import policies
    count = lab_curves["policy"].n_unique()          # the registry's policies that ran
    words = ("No", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine",
             "Ten", "Eleven", "Twelve")
    return ("Cache policies", f"<p>{words[count] if count < len(words) else count} "
            f"polic{'y' if count == 1 else 'ies'} on the lab's documents "
            "(<code>python -m pipeline policies</code>; a trace: <code>--trace PATH</code>)."
            "</p>", policies.policy_sections(lab_curves))


def trace_group(link: str) -> Group:
    """A link to the trace report written by ``python -m pipeline trace``."""
    return ("Trace replay", f'<p>The last <code>python -m pipeline trace</code> run: '
            f'<a href="{html.escape(link)}">{html.escape(link)}</a> (GPU and CPU hit ratios '
            f'over capacity, tail-first vs head-first, reuse distances).</p>', [])


def render_html(aggregates: pl.DataFrame, requests: pl.DataFrame, provenance: dict,
                scenario: dict, predicted: pl.DataFrame | None = None,
                latencies: dict | None = None, measured_extra: list[Section] = (),
                extra_groups: list[Group] = ()) -> str:
    """The whole report page as one HTML string, libraries inlined. ``measured_extra`` goes
    at the end of the measured group; ``extra_groups`` after it."""
    _check_inputs(aggregates, requests)
    simulated, measured = build_sections(aggregates, requests, scenario, predicted, latencies)
    measured = [*measured, *measured_extra]
    passes = ", ".join(scenario["passes"])
    lede = (f"kvlab simulates {scenario['docs']} documents of {scenario['tokens']} tokens "
            f"reused as prompt prefixes, read in passes {passes} through a GPU LRU KV cache "
            f"optionally backed by a CPU tier, and compares the predicted tiers with "
            f"measured time to first token.")
    return page_html("kvlab report", lede, [
        ("Simulated cache", "", simulated),
        ("Measured TTFT", provenance_block(provenance), measured), *extra_groups])


def write_report(path: str | os.PathLike, *, aggregates: pl.DataFrame,
                 requests: pl.DataFrame, provenance: dict, scenario: dict,
                 predicted: pl.DataFrame | None = None, latencies: dict | None = None) -> Path:
    """Write the self-contained HTML report to ``path`` atomically; return the path.

    ``predicted`` (aggregates plus ``predicted_ttft_ms``) and ``latencies`` (see
    ``pipeline.ttft.latency``) add the predicted-TTFT chart.
    """
    target = Path(path)
    text = render_html(aggregates, requests, provenance, scenario, predicted, latencies)
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(target) as handle:
        handle.write(text)
    return target
