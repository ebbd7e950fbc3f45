"""Report sections: measured against predicted TTFT per request under a fitted step-time model.

Input: the per-request frame of ``pipeline.fit.evaluate.predictions`` (``file``, ``load``,
``line``, ``prompt_tokens``, ``measured_ttft_ms``, ``predicted_ttft_ms``, ``held_out``,
``error_pct``), from ``fit --report`` or, for ``run``'s page, ``pipeline.fit.per_request``
(the committed fit and its load holdout). ``scatter`` draws every request's measured against predicted TTFT on
log scales with the line of exact prediction; ``timeline`` draws both per request in sending
order, one panel per load level (queueing shows as a rising run of points);
``provenance_html`` labels the figure (fitted, which file, engine, model, hardware).
"""

from __future__ import annotations

import html

import altair as alt
import polars as pl

from pipeline.charts import Section
from pipeline.charts.parts import tooltips

__all__ = ["caption", "page_sections", "provenance_html", "scatter", "timeline"]


#: "held out" or "fitted" per request (the scatter's shapes)
SET = (pl.when(pl.col("held_out")).then(pl.lit("held out")).otherwise(pl.lit("fitted"))
       .alias("set"))


def _span(frame: pl.DataFrame) -> tuple[float, float]:
    """The TTFT axis range: every measured and predicted value with a margin."""
    both = pl.concat([frame["measured_ttft_ms"], frame["predicted_ttft_ms"]])
    return float(max(both.min(), 1e-3)) / 1.3, float(both.max()) * 1.3


def scatter(frame: pl.DataFrame, title: str = "measured vs predicted TTFT per request"
            ) -> alt.LayerChart:
    """Measured (x) against predicted (y) TTFT per request, log scales, colour = load."""
    data = frame.select("measured_ttft_ms", "predicted_ttft_ms", "prompt_tokens", "load",
                        "line", SET, pl.col("error_pct").round(1))
    low, top = _span(frame)
    scale = alt.Scale(type="log", domain=[low, top], nice=False)
    ticks = [v * 10 ** k for k in range(-3, 8) for v in (1, 2, 5) if low <= v * 10 ** k <= top]
    points = alt.Chart(data).mark_point(filled=True, size=40, opacity=0.8).encode(
        x=alt.X("measured_ttft_ms:Q", title="measured TTFT (ms, log scale)", scale=scale,
                axis=alt.Axis(values=ticks)),
        y=alt.Y("predicted_ttft_ms:Q", title="predicted TTFT (ms, log scale)", scale=scale,
                axis=alt.Axis(values=ticks)),
        color=alt.Color("load:N", title="load"), shape=alt.Shape("set:N", title=None),
        tooltip=tooltips("load", "line", "prompt_tokens", "set",
                         alt.Tooltip("measured_ttft_ms:Q", format=".1f"),
                         alt.Tooltip("predicted_ttft_ms:Q", format=".1f"), "error_pct"))
    line = alt.Chart(pl.DataFrame({"x": [low, top], "y": [low, top]})).mark_line(
        clip=True, color="gray").encode(x=alt.X("x:Q", scale=scale), y=alt.Y("y:Q", scale=scale))
    return alt.layer(line, points, title=title, width=420, height=420)


def timeline(frame: pl.DataFrame) -> alt.FacetChart:
    """Per load level: each request's measured (dot) and predicted (triangle) TTFT in
    sending order, log scale."""
    data = (frame.with_columns(request=pl.int_range(pl.len()).over("file", "load"))
            .select("load", "request", "line", "prompt_tokens", "measured_ttft_ms",
                    "predicted_ttft_ms")
            .unpivot(index=["load", "request", "line", "prompt_tokens"],
                     on=["measured_ttft_ms", "predicted_ttft_ms"], variable_name="what",
                     value_name="ttft_ms")
            .with_columns(pl.col("what").replace_strict({"measured_ttft_ms": "measured",
                                                         "predicted_ttft_ms": "predicted"})))
    return alt.Chart(data).mark_point(filled=True, size=36).encode(
        x=alt.X("request:O", title="request (in sending order)",
                axis=alt.Axis(labelAngle=0, values=list(range(0, 200, 5)))),
        y=alt.Y("ttft_ms:Q", title="TTFT (ms, log scale)",
                scale=alt.Scale(type="log", domain=list(_span(frame)), nice=False)),
        color=alt.Color("what:N", title=None,
                        scale=alt.Scale(domain=["measured", "predicted"],
                                        range=["#1565c0", "#e65100"])),
        shape=alt.Shape("what:N", title=None,
                        scale=alt.Scale(domain=["measured", "predicted"],
                                        range=["circle", "triangle-down"])),
        tooltip=tooltips("load", "line", "prompt_tokens", "what",
                         alt.Tooltip("ttft_ms:Q", format=".1f")),
    ).properties(width=760, height=110).facet(
        row=alt.Row("load:N", title=None, sort=list(dict.fromkeys(data["load"]))))


def _p(frame: pl.DataFrame, q: float) -> float:
    return float(frame["error_pct"].abs().quantile(q, "linear"))


def caption(frame: pl.DataFrame, in_sample: str = "") -> str:
    """The error over all requests, per load level, and what the figure is (in-sample or
    held out)."""
    loads = "; ".join(f"{load} {_p(group, 0.5):.1f} %" for (load,), group
                      in frame.group_by("load", maintain_order=True))
    held = frame.filter(pl.col("held_out"))
    held_part = (f"; the {held.height} held-out requests: p50 {_p(held, 0.5):.1f} %, p90 "
                 f"{_p(held, 0.9):.1f} %" if held.height else "")
    return (f"{frame.height} measured requests against the fitted step-time model's simulated "
            f"TTFT (queueing included): |error| p50 {_p(frame, 0.5):.1f} %, p90 "
            f"{_p(frame, 0.9):.1f} %{held_part}; p50 per load: {loads}"
            + (f" ({in_sample})" if in_sample else "") + ".")


def provenance_html(provenance: dict[str, str],
                    holdout: dict[str, str] | None = None) -> str:
    """The figures' label: fitted (not measured, not a roofline), which file, engine, model,
    hardware, schedule and whether the requests were in the fit; with ``holdout`` (the
    provenance of a ``fit --holdout`` file of the same measurements) its file and holdout."""
    e = {key: html.escape(str(value)) for key, value in provenance.items()}
    held = "" if holdout is None else (
        f"<p>The held-out figure: <strong>fitted</strong> step-time model "
        f"<code>{html.escape(holdout['fitted_file'])}</code>, "
        f"{html.escape(holdout['in_sample'])}.</p>")
    return ('<div class="provenance real">'
            f"<p>Predicted TTFT: <strong>fitted</strong> step-time model "
            f"<code>{e['fitted_file']}</code> ({e['fit']}).</p>"
            f"<p>Engine {e['engine']}, served model {e['served_model']}, hardware: "
            f"{e['hardware']}; measured files {e['sources']}"
            + ("" if provenance["schedule"] in provenance["fit"] else
               f"; schedule: {e['schedule']}") + ".</p>"
            f"<p>{e['in_sample'].capitalize()}: this shows how well the model describes these "
            f"measurements.</p>{held}</div>")


def page_sections(frame: pl.DataFrame, in_sample: str = "",
                  holdout: tuple[pl.DataFrame, str] | None = None) -> list[Section]:
    """The scatter, with ``holdout`` (a held-out fit's frame and its in_sample sentence) the
    held-out scatter, and the per-request timeline, with their captions."""
    first = caption(frame, in_sample)
    worst = frame.sort(pl.col("error_pct").abs(), descending=True).row(0, named=True)
    second = (f"Measured and predicted TTFT of every request in sending order per load level; "
              f"the largest miss is line {worst['line']} of {worst['load']} "
              f"({worst['prompt_tokens']:,} prompt tokens: measured "
              f"{worst['measured_ttft_ms']:.0f} ms, predicted {worst['predicted_ttft_ms']:.0f} "
              f"ms).")
    sections = [Section("fitted-ttft-scatter", scatter(frame), first)]
    if holdout is not None:
        whole = (holdout[0].group_by("load", maintain_order=True).agg(pl.col("held_out").all())
                 .filter(pl.col("held_out"))["load"].to_list())
        title = (f"fitted without {' and '.join(whole)}: measured vs predicted TTFT" if whole
                 else "held out (squares): measured vs predicted TTFT")
        sections.append(Section("fitted-ttft-holdout", scatter(holdout[0], title),
                                caption(holdout[0], holdout[1])))
    return [*sections, Section("fitted-ttft-timeline", timeline(frame), second)]
