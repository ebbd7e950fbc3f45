"""Report sections for sizing the CPU tier: the cache hit ratio against the CPU capacity (the
target and the answer marked), predicted TTFT against it (with the measured points and their
error), and the fit's predicted vs measured TTFT per pass. Capacities read in tokens with
GiB of the chosen KV model beside them (``pipeline.charts.parts.Units``).

Inputs come from ``pipeline.plan.search`` (an ``Evaluator`` for one workload and GPU capacity,
optionally a ``PlanResult``) and ``pipeline.ttft.model.residuals_by_pass``.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import polars as pl

from pipeline.sizes import grids
from pipeline.charts import Section
from pipeline.charts.parts import Units
from pipeline.sizes.units import KVSize
from pipeline.plan.search import Evaluator, PlanResult, Target
from pipeline.workloads.documents import pass_name

__all__ = ["curve_capacities", "capacity_curve", "measured_points", "ttft_capacity_section",
           "hit_ratio_section", "fit_section", "sweep_ttft_section"]

WIDTH, HEIGHT = 640, 300


def curve_capacities(evaluator: Evaluator, points: int = 40, limit: int = 400,
                     extra: int = 0) -> list[int]:
    """CPU capacities to draw: 0, every change point and the token below it (at most
    ``limit``, evenly thinned), and an even grid up to 1.1 x max(last change point, extra)."""
    low, high = evaluator.candidates()
    changes = np.concatenate((low, high))
    if changes.size > limit // 2:
        changes = changes[np.linspace(0, changes.size - 1, limit // 2).round().astype(int)]
    top = max(int(changes.max()) if changes.size else 1, extra)
    grid = grids.even(1.1 * top, points)
    values = {0, *grid.tolist(), *changes.tolist(), *(changes - 1).tolist()}
    return sorted(int(v) for v in values if v >= 0)


def capacity_curve(evaluator: Evaluator, capacities: list[int]) -> pl.DataFrame:
    """cpu_capacity, pass_index, pass_name, p50_ms, mean_ms, hit_ratio at each capacity."""
    return pl.concat([evaluator.figures(c).select(pl.lit(c, pl.Int64).alias("cpu_capacity"),
                                                  "pass_index", "pass_name", "p50_ms", "mean_ms",
                                                  "hit_ratio") for c in capacities])


def measured_points(residuals: pl.DataFrame, measured_cpu: int,
                    pass_names: list[str]) -> pl.DataFrame:
    """The measured configs placed on the CPU axis (baseline at 0, lmcache at
    ``measured_cpu``), their passes matched by order to ``pass_names``; empty when the pass
    counts differ. Columns: cpu_capacity, pass_name, config, measured/predicted, error %."""
    frames = []
    for config, cpu in (("baseline", 0), ("lmcache", measured_cpu)):
        rows = residuals.filter(pl.col("config") == config)
        if rows.height != len(pass_names):
            continue
        frames.append(rows.select(
            pl.lit(cpu, pl.Int64).alias("cpu_capacity"),
            pl.Series("pass_name", pass_names), "config", pl.col("pass").alias("measured_pass"),
            "measured_p50_ms", "predicted_p50_ms", "error_p50_pct", "measured_mean_ms",
            "predicted_mean_ms", "error_mean_pct"))
    return pl.concat(frames) if frames else pl.DataFrame()


def _units(kv: KVSize) -> Units:
    return Units(kv.bytes_per_token, kv.name)


def _x(kv: KVSize) -> alt.X:
    return _units(kv).axis("cpu_capacity", "CPU tier capacity (tokens)", log=False)


def _answer_rule(result: PlanResult, kv: KVSize, top: int) -> alt.LayerChart:
    """The answer's dashed rule, labelled at the top of the plot on the side with room (so
    the label never runs over the y-axis ticks); its GiB rounded up (an "at least" size)."""
    left = result.cpu_tokens <= 0.6 * max(top, 1)
    tokens = result.cpu_tokens
    label = f"plan: {tokens:,} tokens = {_units(kv).gib(tokens):,.2f} GiB"
    frame = pl.DataFrame({"x": [tokens], "label": [label]})
    base = alt.Chart(frame).encode(x=alt.X("x:Q"))
    return alt.layer(base.mark_rule(strokeDash=[5, 4], color="#555"),
                     base.mark_text(align="left" if left else "right", dx=5 if left else -5,
                                    color="#333", fontWeight="bold")
                     .encode(y=alt.YValue(10), text=alt.Text("label:N")))


#: the passes' colour and dash, shared by the lines and the measured points
_PASS_COLOUR = alt.Color("pass_name:N", title="pass", sort=None)
_PASS_DASH = alt.StrokeDash("pass_name:N", title="pass", sort=None)


def _pass_lines(evaluator: Evaluator, kv: KVSize, result: PlanResult | None, extra: int,
                y: alt.Y, gib_format: str, *tooltips: alt.Tooltip
                ) -> tuple[pl.DataFrame, alt.Chart]:
    """The figures per pass at the drawn capacities (to at least ``extra``; the answer and
    the token below it when there is one) with ``cpu_gib``, and their step lines."""
    capacities = set(curve_capacities(evaluator, extra=extra))
    if result is not None and result.status == "met":
        capacities |= {result.cpu_tokens, result.cpu_tokens - 1}
    curve = capacity_curve(evaluator, sorted(capacities)).with_columns(
        cpu_gib=pl.col("cpu_capacity") * kv.bytes_per_token / 2**30)
    lines = alt.Chart(curve).mark_line(interpolate="step-after", strokeWidth=2).encode(
        x=_x(kv), y=y, color=_PASS_COLOUR, strokeDash=_PASS_DASH,
        tooltip=[alt.Tooltip("cpu_capacity:Q", format=",d", title="CPU tokens"),
                 alt.Tooltip("cpu_gib:Q", format=gib_format, title="GiB"),
                 alt.Tooltip("pass_name:N"), *tooltips])
    return curve, lines


def hit_ratio_section(evaluator: Evaluator, kv: KVSize, target: Target, names: list[str],
                      result: PlanResult | None = None, extra: int = 0) -> Section:
    """Cache hit ratio (GPU + CPU share of prompt tokens) per pass against the CPU tier's
    capacity (drawn to at least ``extra``, as the TTFT section); a hit-ratio target as a
    dashed line, the answer as a rule."""
    units = _units(kv)
    curve, lines = _pass_lines(
        evaluator, kv, result, extra,
        alt.Y("hit_ratio:Q", title="cache hit ratio (GPU + CPU, of prompt tokens)",
              scale=alt.Scale(domain=[0, 1])), ",.3f", alt.Tooltip("hit_ratio:Q", format=".4f"))
    layers: list = [lines]
    chosen = [names[i] for i in target.passes]
    if target.kind == "hit_ratio":
        goal = alt.Chart(pl.DataFrame({"y": [target.value],
                                       "label": [f"target {target.value:g}"]})).encode(y=alt.Y("y:Q"))
        layers += [goal.mark_rule(strokeDash=[10, 3, 2, 3], color="#222", strokeWidth=1.5),
                   goal.mark_text(align="right", dy=-6, color="#222", fontWeight="bold")
                   .encode(x=alt.XValue(WIDTH - 4), text=alt.Text("label:N"))]
    if result is not None and result.status == "met":
        layers.append(_answer_rule(result, kv, int(curve["cpu_capacity"].max())))
    chart = alt.layer(*layers, width=WIDTH, height=HEIGHT)
    at = {row["pass_name"]: row["hit_ratio"] for row in
          curve.filter(pl.col("cpu_capacity") == 0).iter_rows(named=True)}
    start = ", ".join(f"{name} {at[name]:.3f}" for name in chosen if at.get(name) is not None)
    caption = (f"Cache hit ratio per pass against the CPU tier at GPU "
               f"{units.tokens(evaluator.gpu_capacity)}; without a CPU tier: {start}")
    if result is None or target.kind != "hit_ratio":
        caption += "."
    elif result.status == "met":
        caption += (f"; the smallest CPU tier that brings {', '.join(chosen)} to "
                    f"{target.value:g} is {units.tokens(result.cpu_tokens)} (the dashed rule).")
    elif result.status == "gpu_alone":
        caption += f": the GPU alone meets {target.value:g}."
    else:
        caption += f": no CPU tier reaches {target.value:g} in {', '.join(chosen)}."
    return Section("plan-hit-ratio", chart, caption)


def ttft_capacity_section(evaluator: Evaluator, kv: KVSize, statistic: str = "p50",
                          measured: pl.DataFrame | None = None,
                          result: PlanResult | None = None, provenance: str = "") -> Section:
    """Predicted TTFT (``statistic`` p50 or mean) per pass against the CPU tier's capacity;
    ``provenance`` says what the TTFT model was fitted on (e.g. the SYNTHETIC file)."""
    column = f"{statistic}_ms"
    extra = int(measured["cpu_capacity"].max()) if measured is not None and measured.height else 0
    curve, lines = _pass_lines(evaluator, kv, result, extra,
                               alt.Y(f"{column}:Q", title=f"predicted {statistic} TTFT (ms)"),
                               ".3f", alt.Tooltip(f"{column}:Q", format=".1f"),
                               alt.Tooltip("hit_ratio:Q", format=".3f"))
    layers: list = [lines]
    caption_tail = ""
    if measured is not None and measured.height:
        layers.append(alt.Chart(measured).mark_point(filled=True, size=90, shape="diamond",
                                                     stroke="black", strokeWidth=0.5).encode(
            x=_x(kv), y=alt.Y(f"measured_{column}:Q"), color=_PASS_COLOUR, strokeDash=_PASS_DASH,
            tooltip=[alt.Tooltip("config:N"), alt.Tooltip("measured_pass:N"),
                     alt.Tooltip(f"measured_{column}:Q", format=".1f"),
                     alt.Tooltip(f"predicted_{column}:Q", format=".1f"),
                     alt.Tooltip(f"error_{statistic}_pct:Q", format=".1f", title="error %")]))
        worst = measured[f"error_{statistic}_pct"].abs().max()
        caption_tail = (f"; the measured passes (diamonds: baseline at CPU 0, lmcache at its CPU "
                        f"tier) are within {worst:.1f} % of the fitted model")
    if result is not None and result.status == "met":
        layers.append(_answer_rule(result, kv, int(curve["cpu_capacity"].max())))
    chart = alt.layer(*layers, width=WIDTH, height=HEIGHT)
    gpu = evaluator.gpu_capacity
    first, last = curve.filter(pl.col("cpu_capacity") == 0), curve.filter(
        pl.col("cpu_capacity") == curve["cpu_capacity"].max())
    drops = ", ".join(f"{a['pass_name']} {a[column]:.1f} -> {b[column]:.1f} ms"
                      for a, b in zip(first.iter_rows(named=True), last.iter_rows(named=True))
                      if a[column] is not None and b[column] is not None)
    caption = (f"Predicted {statistic} TTFT per pass against the CPU tier at GPU {gpu:,} tokens "
               f"({kv.name}, {kv.bytes_per_token:,} bytes per token), from no CPU tier to every "
               f"CPU hit the workload can get: {drops}{caption_tail}."
               f"{' TTFT model: ' + provenance + '.' if provenance else ''}")
    return Section("plan-ttft-capacity", chart, caption)


def fit_section(residuals: pl.DataFrame, statistic: str = "p50") -> Section:
    """Measured vs predicted TTFT per (config, pass), with the error in percent."""
    frame = residuals.unpivot(index=["config", "pass", f"error_{statistic}_pct"],
                              on=[f"measured_{statistic}_ms", f"predicted_{statistic}_ms"],
                              variable_name="series", value_name="ttft_ms").with_columns(
        pl.col("series").str.split("_").list.first())
    chart = alt.Chart(frame).mark_bar().encode(
        x=alt.X("pass:N", title=None, sort=None, axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("series:N", sort=["measured", "predicted"]),
        y=alt.Y("ttft_ms:Q", title=f"{statistic} TTFT (ms)"),
        color=alt.Color("series:N", title=None,
                        scale=alt.Scale(domain=["measured", "predicted"],
                                        range=["#555555", "#4c78a8"])),
        column=alt.Column("config:N", title=None),
        tooltip=[alt.Tooltip("config:N"), alt.Tooltip("pass:N"), alt.Tooltip("series:N"),
                 alt.Tooltip("ttft_ms:Q", format=".1f"),
                 alt.Tooltip(f"error_{statistic}_pct:Q", format=".1f", title="error %")],
    ).properties(width=WIDTH // 2 - 40, height=HEIGHT - 60)
    worst = residuals.select(pl.col(f"error_{statistic}_pct").abs().max()).item()
    caption = (f"The fitted TTFT model against the measured {statistic} per pass: the worst "
               f"error is {worst:.1f} % (goal: within 10 %).")
    return Section("plan-fit", chart, caption)


def sweep_ttft_section(predicted: pl.DataFrame, sweep: str = "cpu_cliff",
                       statistic: str = "p50") -> Section:
    """Predicted TTFT per pass along one sweep of ``run`` (``predict_pass_ttft``'s output on
    the aggregates: columns sweep, gpu_capacity, cpu_capacity, pass_index, pass_order,
    predicted_p50_ms, predicted_mean_ms), to sit next to that sweep's hit curve."""
    axis = "cpu_capacity" if sweep == "cpu_cliff" else "gpu_capacity"
    column = f"predicted_{statistic}_ms"
    frame = (predicted.filter(pl.col("sweep") == sweep)
             .with_columns(pass_name=pass_name(pl.col("pass_index"), pl.col("pass_order")))
             .sort("pass_index", axis))
    tier = "CPU" if axis == "cpu_capacity" else "GPU"
    chart = alt.Chart(frame).mark_line(interpolate="step-after", strokeWidth=2).encode(
        x=alt.X(f"{axis}:Q", title=f"{tier} capacity (tokens)", axis=alt.Axis(format="~s")),
        y=alt.Y(f"{column}:Q", title=f"predicted {statistic} TTFT (ms)"),
        color=alt.Color("pass_name:N", title="pass", sort=None),
        strokeDash=alt.StrokeDash("pass_name:N", title="pass", sort=None),
        tooltip=[alt.Tooltip(f"{axis}:Q", format=",d"), alt.Tooltip("pass_name:N"),
                 alt.Tooltip(f"{column}:Q", format=".1f")],
    ).properties(width=WIDTH, height=HEIGHT - 60)
    ends = []
    for (name,), group in frame.group_by("pass_name", maintain_order=True):
        values = group[column].drop_nulls()
        if values.len():
            ends.append(f"{name} {values[0]:.1f} -> {values[-1]:.1f} ms")
    fixed = frame["gpu_capacity"][0] if axis == "cpu_capacity" and frame.height else None
    where = f" at GPU {fixed:,} tokens" if fixed is not None else " without a CPU tier"
    caption = (f"Predicted {statistic} TTFT per pass along the {tier} capacity{where}, from the "
               f"fitted TTFT model: {', '.join(ends)} from the smallest to the largest "
               f"capacity.")
    return Section(f"plan-sweep-{sweep}", chart, caption)
