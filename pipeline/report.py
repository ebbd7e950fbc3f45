"""Write kvlab's report: one self-contained, offline HTML page of altair charts.

``write_report(path, aggregates=..., requests=..., provenance=..., scenario=...)`` renders
seven sections: the GPU cliff, the CPU cliff, a GPU x CPU heatmap, a per-pass tier
breakdown, measured TTFT per request, baseline/lmcache TTFT ratios and the provenance of
the measured file. Every caption states its finding with numbers computed from the inputs.
Vega, Vega-Lite and vega-embed are inlined once (``vl_convert.javascript_bundle``), so the
page fetches nothing; it is written atomically (temporary file + ``os.replace``).
"""

from __future__ import annotations

import html
import os
from pathlib import Path

import altair as alt
import polars as pl

from kvlab.kvsim import TIERS
from kvlab.summarize import CONFIGS, atomic_output
from pipeline import measured
from pipeline.charts import Chart, Section, page_html
from pipeline.sweeps import AGGREGATE_SCHEMA, SWEEPS

__all__ = ["write_report", "render_html", "build_sections", "provenance_block", "Section",
           "TIER_COLOURS", "REQUEST_COLUMNS"]


TIER_COLOURS = ("#2e7d32", "#1f6fb4", "#c62828")   # green, blue, red: fastest first
TIER_NAMES = {"gpu": "GPU hits", "cpu": "CPU hits", "miss": "misses"}
TIER_COLUMNS = {"gpu_hits": "gpu", "cpu_hits": "cpu", "misses": "miss"}
BASELINE, OFFLOADED = CONFIGS
SECOND_PASS = 1                                      # 0-based pass_index of the replay
WIDTH, HEIGHT = 620, 260

REQUEST_COLUMNS = ("config", "pass", "doc", "ttft_ms", "tier", "request", "line")


# --------------------------------------------------------------------------- inputs


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


def working_set(scenario: dict) -> int:
    """Tokens of all documents together: docs x tokens."""
    return scenario["docs"] * scenario["tokens"]


def second_pass(aggregates: pl.DataFrame, sweep: str) -> pl.DataFrame:
    """The second-pass rows of one sweep, with ``hits`` = GPU + CPU hits."""
    return (aggregates
            .filter(pl.col("sweep") == sweep, pl.col("pass_index") == SECOND_PASS)
            .with_columns(hits=pl.col("gpu_hits") + pl.col("cpu_hits")))


def change_points(frame: pl.DataFrame, x: str, y: str) -> pl.DataFrame:
    """Rows where ``y`` changes along ``x`` (plus the last): exact for a step-after line."""
    return (frame.sort(x)
            .filter(pl.col(y).ne_missing(pl.col(y).shift(1))
                    | (pl.int_range(pl.len()) == pl.len() - 1)))


def _fmt(value: float) -> str:
    """Three significant digits without an exponent: 576, 48.6, 1.23."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


# --------------------------------------------------------------------------- chart parts


def tier_colour(title: str | None = "predicted tier") -> alt.Color:
    """The shared gpu/cpu/miss colour encoding."""
    return alt.Color("tier:N", title=title,
                     scale=alt.Scale(domain=list(TIERS), range=list(TIER_COLOURS)),
                     legend=alt.Legend(labelExpr="{'gpu': 'GPU', 'cpu': 'CPU', "
                                                 "'miss': 'miss'}[datum.label]"))


def working_set_rule(tokens: int, label: str = "working set") -> alt.LayerChart:
    """A dashed vertical rule at ``tokens`` with a label."""
    frame = pl.DataFrame({"x": [tokens], "label": [f"{label} {tokens}"]})
    base = alt.Chart(frame).encode(x="x:Q")
    return alt.layer(
        base.mark_rule(strokeDash=[5, 4], color="#555"),
        base.mark_text(align="right", dx=-5, color="#555")
            .encode(y=alt.value(HEIGHT / 2), text="label:N"),
    )


def step_with_spec_points(frame: pl.DataFrame, x: str, y: str, spec_points: list[int],
                          x_title: str, y_title: str, colour: str) -> alt.LayerChart:
    """A step-after line of ``y`` over ``x`` with the spec capacities marked and labelled."""
    x_enc = alt.X(f"{x}:Q", title=x_title, axis=alt.Axis(format="d"))
    y_enc = alt.Y(f"{y}:Q", title=y_title, scale=alt.Scale(domain=[0, frame[y].max() or 1]))
    line = (alt.Chart(change_points(frame, x, y))
            .mark_line(interpolate="step-after", color=colour, strokeWidth=2)
            .encode(x=x_enc, y=y_enc))
    spec = frame.filter(pl.col(x).is_in(spec_points))
    marks = alt.Chart(spec).encode(x=x_enc, y=y_enc,
                                   tooltip=[alt.Tooltip(f"{x}:Q", format="d"), f"{y}:Q"])
    return alt.layer(
        line,
        marks.mark_point(filled=True, size=70, color="black"),
        marks.mark_text(angle=300, align="left", dx=5, dy=-6, fontSize=10)
             .encode(text=alt.Text(f"{x}:Q", format="d")),
    )


# --------------------------------------------------------------------------- 1 GPU cliff


def gpu_cliff_chart(aggregates: pl.DataFrame, scenario: dict) -> alt.LayerChart:
    """Second-pass hits vs GPU capacity (no CPU tier), working set and spec points marked."""
    frame = second_pass(aggregates, "gpu_cliff")
    steps = step_with_spec_points(frame, "gpu_capacity", "hits", scenario["gpu_spec_points"],
                                  "GPU capacity (tokens)", "second-pass hits", TIER_COLOURS[0])
    return alt.layer(steps, working_set_rule(working_set(scenario))).properties(
        title="GPU cliff: second-pass hits vs GPU capacity (no CPU tier)",
        width=WIDTH, height=HEIGHT)


def cliff_summary(frame: pl.DataFrame, x: str, y: str, target: pl.Expr) -> dict:
    """Where ``target`` first holds along ``x``, and the ``y`` range and last ``x`` before it."""
    cliff = frame.filter(target).get_column(x).min()
    before = frame if cliff is None else frame.filter(pl.col(x) < cliff)
    return {"cliff": cliff, "last_before": before.get_column(x).max(),
            "low": before.get_column(y).min(), "high": before.get_column(y).max(),
            "top": frame.get_column(x).max()}


def _span(low: int, high: int) -> str:
    """``"3"`` or ``"0-3"``."""
    return f"{low}" if low == high else f"{low}-{high}"


def gpu_cliff_caption(aggregates: pl.DataFrame, scenario: dict) -> str:
    """One sentence: hits before the cliff, and the capacity where all hit."""
    frame = second_pass(aggregates, "gpu_cliff")
    n, ws = int(frame.get_column("accesses").max()), working_set(scenario)
    s = cliff_summary(frame, "gpu_capacity", "hits", pl.col("hits") == pl.col("accesses"))
    if s["cliff"] is None:
        return (f"Second-pass hits never reach all {n}: {_span(s['low'], s['high'])} at every "
                f"GPU capacity up to {s['top']} tokens (working set {ws}).")
    short = " (one token short of the working set)" if s["last_before"] == ws - 1 else ""
    product = f"{scenario['docs']} × {scenario['tokens']}"
    where = (f", the working set ({product})" if s["cliff"] == ws
             else f" (working set {product} = {ws})")
    return (f"Second-pass hits are {_span(s['low'], s['high'])} at every GPU capacity up to "
            f"{s['last_before']} tokens{short} and all {n} from {s['cliff']}{where}.")


# --------------------------------------------------------------------------- 2 CPU cliff


def cpu_cliff_chart(aggregates: pl.DataFrame, scenario: dict) -> alt.LayerChart:
    """Second-pass misses vs CPU capacity at a fixed GPU capacity."""
    frame = second_pass(aggregates, "cpu_cliff")
    steps = step_with_spec_points(frame, "cpu_capacity", "misses", scenario["cpu_spec_points"],
                                  "CPU capacity (tokens)", "second-pass misses",
                                  TIER_COLOURS[2])
    return alt.layer(steps, working_set_rule(working_set(scenario))).properties(
        title=f"CPU cliff: second-pass misses vs CPU capacity "
              f"(GPU fixed at {scenario['cpu_sweep_gpu']})",
        width=WIDTH, height=HEIGHT)


def cpu_cliff_caption(aggregates: pl.DataFrame, scenario: dict) -> str:
    """One sentence: misses before the CPU holds the working set, and where they vanish."""
    frame = second_pass(aggregates, "cpu_cliff")
    ws, gpu = working_set(scenario), scenario["cpu_sweep_gpu"]
    s = cliff_summary(frame, "cpu_capacity", "misses", pl.col("misses") == 0)
    if s["cliff"] is None:
        return (f"With GPU {gpu}, second-pass misses stay {_span(s['low'], s['high'])} at "
                f"every CPU capacity up to {s['top']} tokens (working set {ws}).")
    whole = ": the CPU tier must hold the whole working set" if s["cliff"] == ws else ""
    return (f"With GPU {gpu}, second-pass misses stay {_span(s['low'], s['high'])} at every "
            f"CPU capacity up to {s['last_before']} tokens and drop to 0 from "
            f"{s['cliff']}{whole} ({ws} tokens).")


# --------------------------------------------------------------------------- 3 heatmap


def grid_frame(aggregates: pl.DataFrame) -> pl.DataFrame:
    """Second-pass hit ratio per (GPU, CPU) cell of the grid sweep."""
    return (second_pass(aggregates, "grid")
            .with_columns(hit_ratio=pl.col("hits") / pl.col("accesses"))
            .select("gpu_capacity", "cpu_capacity", "hit_ratio", "gpu_hits", "cpu_hits",
                    "misses"))


def heatmap_chart(aggregates: pl.DataFrame, scenario: dict) -> alt.LayerChart:
    """GPU x CPU heatmap of the second-pass hit ratio, each cell labelled."""
    base = alt.Chart(grid_frame(aggregates)).encode(
        x=alt.X("gpu_capacity:O", title="GPU capacity (tokens)", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("cpu_capacity:O", title="CPU capacity (tokens)", sort="descending"))
    cells = base.mark_rect(stroke="white").encode(
        color=alt.Color("hit_ratio:Q", title="second-pass hit ratio",
                        scale=alt.Scale(domain=[0, 1], scheme="greens"),
                        legend=alt.Legend(format="%")),
        tooltip=["gpu_capacity:O", "cpu_capacity:O", alt.Tooltip("hit_ratio:Q", format=".0%"),
                 "gpu_hits:Q", "cpu_hits:Q", "misses:Q"])
    labels = base.mark_text(fontSize=11).encode(
        text=alt.Text("hit_ratio:Q", format=".0%"),
        color=alt.condition(alt.datum.hit_ratio > 0.5, alt.value("white"), alt.value("black")))
    return alt.layer(cells, labels).properties(
        title="Second-pass hit ratio over a GPU × CPU capacity grid",
        width=WIDTH, height=HEIGHT)


def heatmap_caption(aggregates: pl.DataFrame, scenario: dict) -> str:
    """One sentence: how many cells reach 100 % and what they have in common."""
    cells = grid_frame(aggregates).with_columns(
        largest=pl.max_horizontal("gpu_capacity", "cpu_capacity"))
    full = cells.filter(pl.col("hit_ratio") == 1)
    rest = cells.filter(pl.col("hit_ratio") < 1)
    best_rest = rest.get_column("hit_ratio").max()
    tail = ("" if best_rest is None else "; every other cell gets 0%" if best_rest == 0
            else f"; every other cell gets at most {best_rest:.0%}")
    if full.is_empty():
        return f"No cell of the {cells.height}-cell grid reaches 100% second-pass hits{tail}."
    return (f"{full.height} of {cells.height} cells reach 100% second-pass hits, each with a "
            f"tier of at least {full.get_column('largest').min()} tokens (working set "
            f"{working_set(scenario)}){tail}.")


# --------------------------------------------------------------------------- 4 tier breakdown


def breakdown_frame(aggregates: pl.DataFrame, scenario: dict) -> pl.DataFrame:
    """Tier counts per pass for GPU only vs GPU + CPU, long form (one row per tier)."""
    gpu, cpu = scenario["cpu_sweep_gpu"], scenario["offload_cpu"]
    rows = aggregates.filter(pl.col("sweep") == "cpu_cliff", pl.col("gpu_capacity") == gpu,
                             pl.col("cpu_capacity").is_in([0, cpu]))
    if rows.get_column("cpu_capacity").n_unique() < 2:
        raise ValueError(f"cpu_cliff sweep at GPU {gpu} needs CPU capacities 0 and {cpu}")
    return (rows
            .with_columns(
                setup=pl.when(pl.col("cpu_capacity") == 0).then(pl.lit("GPU only"))
                        .otherwise(pl.format("GPU + CPU {}", pl.col("cpu_capacity"))),
                pass_label=pl.format("pass {} ({})", pl.col("pass_index") + 1,
                                     pl.col("pass_order")))
            .unpivot(on=list(TIER_COLUMNS), index=["setup", "cpu_capacity", "pass_index",
                                                   "pass_label"],
                     variable_name="tier", value_name="count")
            .with_columns(tier=pl.col("tier").replace_strict(TIER_COLUMNS),
                          tier_rank=pl.col("tier").replace_strict(
                              {column: rank for rank, column in enumerate(TIER_COLUMNS)},
                              return_dtype=pl.Int8))
            .sort("cpu_capacity", "pass_index", "tier_rank"))


def breakdown_chart(aggregates: pl.DataFrame, scenario: dict) -> alt.FacetChart:
    """Stacked gpu/cpu/miss bars per pass, GPU only beside GPU + CPU."""
    frame = breakdown_frame(aggregates, scenario)
    bars = alt.Chart(frame).mark_bar().encode(
        x=alt.X("pass_label:N", title=None, sort=None, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("count:Q", title="accesses", stack="zero"),
        color=tier_colour("tier"),
        order=alt.Order("tier_rank:Q"),
        tooltip=["setup:N", "pass_label:N", "tier:N", "count:Q"])
    return bars.properties(width=WIDTH // 2 - 20, height=HEIGHT - 40).facet(
        column=alt.Column("setup:N", title=None, sort=frame.get_column("setup").unique(
            maintain_order=True).to_list(), header=alt.Header(labelFontSize=13)),
    ).properties(title=f"Tier of every access per pass at GPU {scenario['cpu_sweep_gpu']}")


def _tier_phrase(frame: pl.DataFrame) -> str:
    """``"4 GPU hits + 6 misses"`` from one setup's rows of one pass (zero tiers left out)."""
    parts = (frame.filter(pl.col("count") > 0).sort("tier_rank")
             .select(pl.format("{} {}", "count", pl.col("tier").replace_strict(TIER_NAMES)))
             .to_series().to_list())
    return " + ".join(parts) or "no accesses"


def breakdown_caption(aggregates: pl.DataFrame, scenario: dict) -> str:
    """One sentence: the last pass's tiers without and with the CPU tier."""
    frame = breakdown_frame(aggregates, scenario)
    last = frame.filter(pl.col("pass_index") == pl.col("pass_index").max())
    alone = _tier_phrase(last.filter(pl.col("cpu_capacity") == 0))
    offload = _tier_phrase(last.filter(pl.col("cpu_capacity") != 0))
    return (f"In {last.get_column('pass_label')[0]} the GPU alone serves "
            f"{alone}, while adding a {scenario['offload_cpu']}-token CPU tier gives "
            f"{offload}.")


# --------------------------------------------------------------------------- 5 measured TTFT


def pass_order(requests: pl.DataFrame) -> list[str]:
    """Measured pass names in the order they were run."""
    return (requests.sort("config", "request").get_column("pass")
            .unique(maintain_order=True).to_list())


def ttft_chart(requests: pl.DataFrame) -> alt.FacetChart:
    """Every request's TTFT (colour = predicted tier) with the per-pass median as a tick."""
    passes = pass_order(requests)
    x = alt.X("pass:N", title=None, sort=passes, axis=alt.Axis(labelAngle=0))
    points = alt.Chart().mark_circle(size=45, opacity=0.85).encode(
        x=x, xOffset=alt.XOffset("doc:O"),
        y=alt.Y("ttft_ms:Q", title="TTFT (ms, log scale)", scale=alt.Scale(type="log")),
        color=tier_colour(),
        tooltip=["config:N", "pass:N", "doc:Q", "tier:N",
                 alt.Tooltip("ttft_ms:Q", format=".1f")])
    median = alt.Chart().encode(x=x, y=alt.Y("median(ttft_ms):Q"),
                                tooltip=["config:N", "pass:N",
                                         alt.Tooltip("median(ttft_ms):Q", format=".1f",
                                                     title="p50 TTFT (ms)")])
    ticks = median.mark_tick(color="black", thickness=3, size=80)
    labels = median.mark_text(dy=-13, fontSize=11, fontWeight="bold").encode(
        text=alt.Text("median(ttft_ms):Q", format=".3~r"))
    return alt.layer(points, ticks, labels, data=requests).properties(
        width=WIDTH // 2 - 20, height=HEIGHT).facet(
        column=alt.Column("config:N", title=None, sort=[BASELINE, OFFLOADED],
                          header=alt.Header(labelFontSize=13)),
    ).properties(title=alt.Title("Measured time to first token per request",
                                 subtitle="dots: requests (colour = tier the simulator "
                                          "predicts); black tick and label: median (ms)"))


def ttft_stats(requests: pl.DataFrame) -> pl.DataFrame:
    """config, pass, p50, mean: pipeline.measured's statistics (exactly summarize.py's)."""
    return measured.stats_table(requests).select("config", "pass", p50="p50_ms",
                                                 mean="mean_ms")


def predicted_tiers(requests: pl.DataFrame, config: str, pass_name: str) -> str:
    """``"10 misses"``: the simulator's predicted tiers of one config's pass."""
    counts = (requests.filter(pl.col("config") == config, pl.col("pass") == pass_name)
              .group_by("tier").len("count")
              .with_columns(tier_rank=pl.col("tier").replace_strict(
                  {tier: rank for rank, tier in enumerate(TIERS)}, return_dtype=pl.Int8)))
    return _tier_phrase(counts)


def ttft_caption(requests: pl.DataFrame) -> str:
    """One sentence: the second pass's p50 per config (baseline, lmcache), with predicted tiers."""
    passes = pass_order(requests)
    replay = passes[min(SECOND_PASS, len(passes) - 1)]
    p50 = dict(ttft_stats(requests).filter(pl.col("pass") == replay)
               .select("config", "p50").iter_rows())
    parts = [f"{config} {_fmt(p50[config])} ms ({predicted_tiers(requests, config, replay)})"
             for config in (BASELINE, OFFLOADED) if config in p50]
    which = "Second pass" if len(passes) > SECOND_PASS else "Pass"
    return f"{which} ({replay}) p50 TTFT: {' vs '.join(parts) or 'no baseline or lmcache'}."


# --------------------------------------------------------------------------- 6 ratios


def ratio_frame(requests: pl.DataFrame) -> pl.DataFrame:
    """baseline / lmcache ratio of p50 and mean TTFT per pass, long form."""
    stats = ttft_stats(requests)
    return (stats.filter(pl.col("config") == BASELINE).drop("config")
            .join(stats.filter(pl.col("config") == OFFLOADED).drop("config"),
                  on="pass", suffix="_offload")
            .select("pass", p50=pl.col("p50") / pl.col("p50_offload"),
                    mean=pl.col("mean") / pl.col("mean_offload"))
            .unpivot(index="pass", variable_name="statistic", value_name="ratio"))


def ratio_chart(requests: pl.DataFrame) -> alt.LayerChart:
    """Bars of the baseline/lmcache TTFT ratio per pass, a dashed rule at 1."""
    base = alt.Chart(ratio_frame(requests)).encode(
        x=alt.X("pass:N", title=None, sort=pass_order(requests), axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("statistic:N", sort=["p50", "mean"]),
        y=alt.Y("ratio:Q", title=f"{BASELINE} / {OFFLOADED} TTFT"))
    bars = base.mark_bar().encode(
        color=alt.Color("statistic:N", title="statistic", sort=["p50", "mean"],
                        scale=alt.Scale(range=["#6a51a3", "#bcbddc"])),
        tooltip=["pass:N", "statistic:N", alt.Tooltip("ratio:Q", format=".2f")])
    labels = base.mark_text(dy=-6, baseline="bottom", fontSize=11).encode(
        text=alt.Text("ratio:Q", format=".2f"))
    one = alt.Chart(pl.DataFrame({"y": [1.0]})).mark_rule(strokeDash=[5, 4], color="#555") \
        .encode(y="y:Q")
    return alt.layer(bars, labels, one).properties(
        title=f"TTFT ratio {BASELINE} / {OFFLOADED} per pass (above 1: {OFFLOADED} faster)",
        width=WIDTH, height=HEIGHT - 40)


def ratio_caption(requests: pl.DataFrame) -> str:
    """One sentence: the p50 ratio of every pass."""
    order = pass_order(requests)
    parts = (ratio_frame(requests).filter(pl.col("statistic") == "p50")
             .sort(pl.col("pass").cast(pl.Enum(order)))
             .select(pl.format("{}× ({})", pl.col("ratio").round(2), "pass"))
             .to_series().to_list())
    return f"{BASELINE.capitalize()}/{OFFLOADED} p50 TTFT ratio by pass: {', '.join(parts)}."


# --------------------------------------------------------------------------- 8 predicted TTFT


def predicted_frame(predicted: pl.DataFrame) -> pl.DataFrame:
    """Second-pass predicted TTFT along both cliffs, long form: sweep, capacity, ttft."""
    replay = predicted.filter(pl.col("pass_index") == SECOND_PASS)
    return pl.concat([
        replay.filter(pl.col("sweep") == "gpu_cliff").select(
            pl.lit("GPU capacity, no CPU tier").alias("axis"),
            pl.col("gpu_capacity").alias("capacity"), "predicted_ttft_ms"),
        replay.filter(pl.col("sweep") == "cpu_cliff").select(
            pl.lit("CPU capacity, GPU fixed").alias("axis"),
            pl.col("cpu_capacity").alias("capacity"), "predicted_ttft_ms"),
    ]).drop_nulls()


def predicted_chart(predicted: pl.DataFrame, scenario: dict) -> alt.FacetChart:
    """Predicted second-pass mean TTFT along the GPU cliff and along the CPU cliff."""
    frame = pl.concat([change_points(part, "capacity", "predicted_ttft_ms")
                       for part in predicted_frame(predicted).partition_by("axis")])
    line = alt.Chart().mark_line(interpolate="step-after", strokeWidth=2, color="#6a51a3",
                                 point=True).encode(
        x=alt.X("capacity:Q", title="capacity (tokens)", axis=alt.Axis(format="d")),
        y=alt.Y("predicted_ttft_ms:Q", title="predicted mean TTFT (ms, log scale)",
                scale=alt.Scale(type="log")),
        tooltip=[alt.Tooltip("capacity:Q", format="d"),
                 alt.Tooltip("predicted_ttft_ms:Q", format=".1f")])
    rule = alt.Chart().mark_rule(strokeDash=[5, 4], color="#555").encode(
        x=alt.datum(working_set(scenario)))
    return alt.layer(line, rule, data=frame).properties(
        width=WIDTH // 2 - 20, height=HEIGHT - 40).facet(
        column=alt.Column("axis:N", title=None, header=alt.Header(labelFontSize=13),
                          sort=["GPU capacity, no CPU tier", "CPU capacity, GPU fixed"]),
    ).resolve_scale(x="independent").properties(title=alt.Title(
        "Predicted second-pass TTFT from simulated hits and measured tier latencies",
        subtitle=f"left: GPU capacity, no CPU tier; right: CPU capacity at GPU "
                 f"{scenario['cpu_sweep_gpu']}; dashed: working set"))


def predicted_caption(predicted: pl.DataFrame, latencies: dict, scenario: dict) -> str:
    """One sentence: the tier latencies and the predicted TTFT on both sides of each cliff."""
    frame = predicted_frame(predicted)
    ws = working_set(scenario)

    def side(axis: str, below: bool) -> str:
        part = frame.filter(pl.col("axis").str.starts_with(axis),
                            (pl.col("capacity") < ws) if below else (pl.col("capacity") >= ws))
        return _fmt(part["predicted_ttft_ms"].median()) if part.height else "n/a"

    gpu_only, offload = (latencies[config] for config in (BASELINE, OFFLOADED))
    known = lambda value: "n/a" if value is None else _fmt(value)  # noqa: E731
    return (f"With the measured medians per tier (GPU hit {known(gpu_only['gpu'])} ms, CPU "
            f"reload {known(offload['cpu'])} ms, recompute {known(gpu_only['miss'])} ms), the "
            f"model predicts a second-pass mean TTFT of {side('GPU', True)} ms below GPU {ws} "
            f"and {side('GPU', False)} ms from it; at GPU {scenario['cpu_sweep_gpu']} a CPU tier "
            f"of {ws} tokens or more gives {side('CPU', False)} ms, less gives "
            f"{side('CPU', True)} ms.")


# --------------------------------------------------------------------------- 7 provenance


def provenance_block(provenance: dict) -> str:
    """HTML paragraph(s) saying which measured file was used, synthetic or real."""
    synthetic = bool(provenance.get("synthetic"))
    kind = ("the bundled <strong>SYNTHETIC</strong> stand-in, not a real measurement"
            if synthetic else "the <strong>real</strong> measurement file")
    source, digest, note = (html.escape(str(provenance.get(key) or ""))
                            for key in ("source", "sha256", "note"))
    note_html = f"<p>Note: {note.rstrip('.')}.</p>" if note else ""
    return (f'<div class="provenance {"synthetic" if synthetic else "real"}">'
            f"<p>Measured input: {kind}.</p>"
            f"<p>Source <code>{source}</code> (sha256 <code>{digest}</code>).</p>"
            f"{note_html}</div>")


# --------------------------------------------------------------------------- page


def build_sections(aggregates: pl.DataFrame, requests: pl.DataFrame, scenario: dict,
                   predicted: pl.DataFrame | None = None, latencies: dict | None = None
                   ) -> tuple[list[Section], list[Section]]:
    """(simulator sections, measured sections), each chart with its caption."""
    simulated = [
        Section("gpu-cliff", gpu_cliff_chart(aggregates, scenario),
                gpu_cliff_caption(aggregates, scenario)),
        Section("cpu-cliff", cpu_cliff_chart(aggregates, scenario),
                cpu_cliff_caption(aggregates, scenario)),
        Section("grid", heatmap_chart(aggregates, scenario),
                heatmap_caption(aggregates, scenario)),
        Section("tiers", breakdown_chart(aggregates, scenario),
                breakdown_caption(aggregates, scenario)),
    ]
    measured = []
    if not requests.is_empty():
        measured.append(Section("ttft", ttft_chart(requests), ttft_caption(requests)))
    if not ratio_frame(requests).is_empty():     # a pass measured under both configs
        measured.append(Section("ratio", ratio_chart(requests), ratio_caption(requests)))
    if predicted is not None and not predicted_frame(predicted).is_empty():
        measured.append(Section("predicted", predicted_chart(predicted, scenario),
                                predicted_caption(predicted, latencies or {}, scenario)))
    return simulated, measured


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


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_output(path) as handle:
        handle.write(text)


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
    _write_atomic(target, text)
    return target
