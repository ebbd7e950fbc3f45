"""What the report's sections share: sizes, the tier colours, chart parts and caption wording.

Section modules (``pipeline/charts/<name>.py``) build on these so every chart looks alike
and every caption words numbers the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import altair as alt
import polars as pl

from pipeline.sizes.units import size_up
from pipeline.ttft.summary import stats_table
from pipeline.cache.tiers import COUNT_NAMES, TIER, TIERS

__all__ = ["Units", "TOKENS", "TIER_COLOURS", "WIDTH", "HEIGHT", "working_set", "tooltips",
           "change_points", "fmt", "span", "tier_colour", "working_set_rule",
           "cliff_chart", "cliff_summary",
           "tier_phrase", "pass_order", "ttft_stats"]

TIER_COLOURS = ("#2e7d32", "#1f6fb4", "#c62828")   # green, blue, red: fastest first
WIDTH, HEIGHT = 620, 260


# --------------------------------------------------------------------------- sizes


@dataclass(frozen=True)
class Units:
    """Tokens, and GiB through ``bytes_per_token`` (of KV model ``name``) when given."""

    bytes_per_token: int | None = None
    name: str = ""

    def gib(self, tokens: int) -> float:
        """``tokens`` in GiB, rounded up to 0.01 (a capacity that answers "at least")."""
        return size_up(tokens * self.bytes_per_token, 2**30, 2)

    def tokens(self, tokens: int) -> str:
        """``"3,057,664 tokens"``, with ``" (373.25 GiB)"`` when sizes were given."""
        text = f"{tokens:,} tokens"
        return text if self.bytes_per_token is None else f"{text} ({self.gib(tokens):,.2f} GiB)"

    def axis(self, field: str, title: str, log: bool = True) -> alt.X:
        """A capacity axis in tokens (log by default), GiB on a second label line when
        sizes were given."""
        scale = alt.Scale(type="log") if log else alt.Scale(zero=True)
        if self.bytes_per_token is None:
            return alt.X(f"{field}:Q", title=title, scale=scale, axis=alt.Axis(format="~s"))
        label = (f"datum.label ? [datum.label, format(datum.value * {self.bytes_per_token} "
                 "/ 1073741824, ',.3~r') + ' GiB'] : ''")
        return alt.X(f"{field}:Q", title=f"{title}; GiB of {self.name} below", scale=scale,
                     axis=alt.Axis(format="~s", labelExpr=label, labelPadding=4))

    def tooltip(self, field: str) -> list[alt.Tooltip]:
        """Tooltips of a token field: tokens, and GiB when sizes were given."""
        tips = [alt.Tooltip(f"{field}:Q", title="tokens", format=",")]
        if self.bytes_per_token is not None:
            tips.append(alt.Tooltip(f"{field}_gib:Q", title="GiB", format=",.2f"))
        return tips

    def with_gib(self, frame: pl.DataFrame, field: str) -> pl.DataFrame:
        """``frame`` plus ``<field>_gib`` when sizes were given."""
        if self.bytes_per_token is None:
            return frame
        return frame.with_columns((pl.col(field) * self.bytes_per_token / 2**30)
                                  .alias(f"{field}_gib"))


TOKENS = Units()


# --------------------------------------------------------------------------- data


def working_set(scenario: dict) -> int:
    """Tokens of all documents together: docs x tokens."""
    return scenario["docs"] * scenario["tokens"]


def change_points(frame: pl.DataFrame, x: str, y: str) -> pl.DataFrame:
    """Rows where ``y`` changes along ``x`` (plus the last): exact for a step-after line."""
    return (frame.sort(x)
            .filter(pl.col(y).ne_missing(pl.col(y).shift(1))
                    | (pl.int_range(pl.len()) == pl.len() - 1)))


def cliff_summary(frame: pl.DataFrame, x: str, y: str, target: pl.Expr) -> dict:
    """Where ``target`` first holds along ``x``, and the ``y`` range and last ``x`` before it."""
    cliff = frame.filter(target).get_column(x).min()
    before = frame if cliff is None else frame.filter(pl.col(x) < cliff)
    return {"cliff": cliff, "last_before": before.get_column(x).max(),
            "low": before.get_column(y).min(), "high": before.get_column(y).max(),
            "top": frame.get_column(x).max()}


def pass_order(requests: pl.DataFrame) -> list[str]:
    """Measured pass names in the order they were run."""
    return (requests.sort("config", "request").get_column("pass")
            .unique(maintain_order=True).to_list())


def ttft_stats(requests: pl.DataFrame) -> pl.DataFrame:
    """config, pass, p50, mean: pipeline.ttft.summary's statistics (exactly summarize.py's)."""
    return stats_table(requests).select("config", "pass", p50="p50_ms", mean="mean_ms")


# --------------------------------------------------------------------------- wording


def fmt(value: float) -> str:
    """Three significant digits without an exponent: 576, 48.6, 1.23."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def span(low: int, high: int) -> str:
    """``"3"`` or ``"0-3"``."""
    return f"{low}" if low == high else f"{low}-{high}"


def tier_phrase(frame: pl.DataFrame) -> str:
    """``"4 GPU hits + 6 misses"`` from rows of ``tier`` and ``count`` (zero tiers left out)."""
    parts = (frame.filter(pl.col("count") > 0).sort(pl.col("tier").cast(TIER))
             .select(pl.format("{} {}", "count", pl.col("tier").replace_strict(COUNT_NAMES)))
             .to_series().to_list())
    return " + ".join(parts) or "no accesses"


# --------------------------------------------------------------------------- chart parts


def tooltips(*fields: str | alt.Tooltip) -> list[alt.Tooltip]:
    """Tooltip channels, shorthands typed here: altair turns each bare string of an encoding
    into its channel class by hashing every schema class it has (about 3 ms a string)."""
    return [field if isinstance(field, alt.Tooltip) else alt.Tooltip(field) for field in fields]


def tier_colour(title: str | None = "predicted tier") -> alt.Color:
    """The shared gpu/cpu/miss colour encoding."""
    return alt.Color("tier:N", title=title,
                     scale=alt.Scale(domain=list(TIERS), range=list(TIER_COLOURS)),
                     legend=alt.Legend(labelExpr="{'gpu': 'GPU', 'cpu': 'CPU', "
                                                 "'miss': 'miss'}[datum.label]"))


def working_set_rule(tokens: int, label: str = "working set") -> alt.LayerChart:
    """A dashed vertical rule at ``tokens`` with a label."""
    frame = pl.DataFrame({"x": [tokens], "label": [f"{label} {tokens}"]})
    base = alt.Chart(frame).encode(x=alt.X("x:Q"))
    return alt.layer(
        base.mark_rule(strokeDash=[5, 4], color="#555"),
        base.mark_text(align="right", dx=-5, color="#555")
            .encode(y=alt.YValue(HEIGHT / 2), text=alt.Text("label:N")),
    )


def cliff_chart(frame: pl.DataFrame, x: str, y: str, spec_points: list[int], x_title: str,
                y_title: str, colour: str, scenario: dict, title: str) -> alt.LayerChart:
    """A cliff: a step-after line of ``y`` over ``x`` with the spec capacities marked and
    labelled, and the working set's rule."""
    x_enc = alt.X(f"{x}:Q", title=x_title, axis=alt.Axis(format="d"))
    y_enc = alt.Y(f"{y}:Q", title=y_title, scale=alt.Scale(domain=[0, frame[y].max() or 1]))
    line = (alt.Chart(change_points(frame, x, y))
            .mark_line(interpolate="step-after", color=colour, strokeWidth=2)
            .encode(x=x_enc, y=y_enc))
    spec = frame.filter(pl.col(x).is_in(spec_points))
    marks = alt.Chart(spec).encode(x=x_enc, y=y_enc,
                                   tooltip=[alt.Tooltip(f"{x}:Q", format="d"), alt.Tooltip(f"{y}:Q")])
    steps = alt.layer(
        line,
        marks.mark_point(filled=True, size=70, color="black"),
        marks.mark_text(angle=300, align="left", dx=5, dy=-6, fontSize=10)
             .encode(text=alt.Text(f"{x}:Q", format="d")),
    )
    return alt.layer(steps, working_set_rule(working_set(scenario)), title=title, width=WIDTH,
                     height=HEIGHT)
