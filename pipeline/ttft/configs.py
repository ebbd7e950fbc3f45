"""Per-config cache models of a measured file: which simulator attributes each config's
requests to tiers.

kvlab models two configs by name: ``baseline`` (``TwoTierCache(gpu, 0)``) and ``lmcache``
(``TwoTierCache(gpu, cpu)``). A file measured under other configs (llama.cpp's ``baseline``,
``cache-4.5``, ``cache``) names a model per config in its sidecar (``<name>.setup.json``,
``pipeline.ttft.measured_setup``) under ``"configs"``::

    {"tokens": 5009, "configs": {
        "baseline":  {"model": "llamacpp", "ram_bytes": null, "role": "gpu-only"},
        "cache-4.5": {"model": "llamacpp", "ram_bytes": 46573024},
        "cache":     {"model": "llamacpp", "ram_bytes": 108670390, "role": "offload"}}}

* ``llamacpp``: ``pipeline.components.llamacpp_cache.LlamaCppPromptCache`` (live context
  = ``gpu``, RAM prompt cache of ``ram_bytes`` = ``cpu``; null = no RAM cache), fed the
  workload's real prompt tokens from the provenance file beside the measurement
  (``<name>.provenance.json``: workload, state size); plain LRU's prediction comes with it
  (``lru_tier``: ``TwoTierCache`` of one request's state and the RAM bytes).
* ``two-tier``: kvlab's ``TwoTierCache(gpu, cpu)`` in tokens, ``tokens`` per document.

``role`` (optional, at most one config each) says which config a TTFT fit (``plan``) takes
as GPU only (``baseline``) and which as offload (``lmcache``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipeline.base.config import BASELINE, OFFLOADED
from pipeline.base.errors import CLIError
from pipeline.sizes.limits import check_value
from pipeline.catalog import names
from pipeline.cache.tiers import TIER

__all__ = ["MODELS", "ROLES", "ConfigModel", "parse_configs", "attribute_configs",
           "as_roles", "agreement_lines"]

#: the registry's measured-config models (``pipeline.catalog``: llamacpp, two-tier)
MODELS = tuple(names(measured=True))
#: role -> the config name kvlab's fits use for it
ROLES = {"gpu-only": BASELINE, "offload": OFFLOADED}


@dataclass(frozen=True)
class ConfigModel:
    """One config's cache model (see the module docstring)."""

    model: str
    ram_bytes: int | None = None
    gpu: int = 0
    cpu: int = 0
    role: str | None = None

    def describe(self) -> str:
        if self.model == "llamacpp":
            ram = "no RAM cache" if self.ram_bytes is None else f"RAM cache {self.ram_bytes:,} B"
            return f"llama.cpp prompt cache ({ram})"
        return f"kvlab TwoTierCache (GPU {self.gpu}, CPU {self.cpu} tokens)"


def parse_configs(path: str | Path, value: object) -> dict[str, ConfigModel]:
    """The sidecar's ``configs`` object; CLIError ``path: configs.NAME...: reason``."""
    if not isinstance(value, dict) or not value:
        raise CLIError(f"{path}: configs must be a non-empty object of config name -> model")
    out, roles = {}, {}
    for name, spec in value.items():
        where = f"{path}: configs.{name}"
        if not isinstance(spec, dict):
            raise CLIError(f"{where}: expected an object with model")
        model = spec.get("model")
        if model not in MODELS:
            raise CLIError(f"{where}.model: expected one of {', '.join(MODELS)}, got {model!r}")
        allowed = {"model", "role"} | ({"ram_bytes"} if model == "llamacpp" else {"gpu", "cpu"})
        unknown = sorted(set(spec) - allowed)
        if unknown:
            raise CLIError(f"{where}: unknown field {unknown[0]!r} for model {model} "
                           f"(expected {', '.join(sorted(allowed))})")
        role = spec.get("role")
        if role is not None and role not in ROLES:
            raise CLIError(f"{where}.role: expected one of {', '.join(ROLES)}, got {role!r}")
        if role is not None and role in roles:
            raise CLIError(f"{where}.role: {role} is already configs.{roles[role]}'s")
        if role is not None:
            roles[role] = name
        if model == "llamacpp":
            if "ram_bytes" not in spec:
                raise CLIError(f"{where}: the llamacpp model needs ram_bytes (null: no RAM "
                               f"cache)")
            out[name] = ConfigModel(model, check_value(f"{where}.ram_bytes", spec["ram_bytes"],
                                                    null=True), role=role)
        else:
            out[name] = ConfigModel(model, gpu=check_value(f"{where}.gpu", spec.get("gpu", 0)),
                                    cpu=check_value(f"{where}.cpu", spec.get("cpu", 0)), role=role)
    return out


def _provenance(measured: Path) -> dict:
    from pipeline.measure.output import provenance_path

    path = provenance_path(measured)
    try:
        document = json.loads(path.read_text(encoding="utf-8-sig"))
        return {"workload": document["workload"], "state_size": document["state_size"]}
    except OSError as exc:
        raise CLIError(f"{path}: the llamacpp model needs the measurement's provenance "
                       f"(workload, state size): {exc.strerror or exc}") from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise CLIError(f"{path}: no workload / state_size in the provenance ({exc})") from None


def _llamacpp(measured: Path, configs: dict[str, ConfigModel]) -> pl.DataFrame:
    """config, request, pass, doc, tier, lru_tier per request the provenance's workload sends."""
    from pipeline.components.llamacpp_cache import StateSize
    from pipeline.measure.llamacpp.compare import predict
    from pipeline.measure.workload import spec_requests

    provenance = _provenance(measured)
    workload, state = provenance["workload"], provenance["state_size"]
    requests = [r for name in configs for r in spec_requests(name, workload)]
    predicted = predict(requests, {name: model.ram_bytes for name, model in configs.items()},
                        StateSize(state["fixed_bytes"], state["bytes_per_token"]),
                        workload["completion_tokens"])
    return predicted.select(
        "config", request=pl.int_range(pl.len(), dtype=pl.Int64).over("config"),
        predicted_pass="pass", predicted_doc="doc", tier="predicted_tier", lru_tier="lru_tier")


def _two_tier(df: pl.DataFrame, name: str, model: ConfigModel, tokens: int) -> pl.DataFrame:
    from kvlab.kvsim import TwoTierCache

    requests = df.filter(pl.col("config") == name).sort("request")
    cache = TwoTierCache(model.gpu, model.cpu)
    tiers = [cache.access(doc, tokens) for doc in requests["doc"]]
    return requests.select("config", "request", predicted_pass="pass", predicted_doc="doc",
                           tier=pl.Series(tiers, dtype=TIER),
                           lru_tier=pl.Series(tiers, dtype=TIER))


def attribute_configs(df: pl.DataFrame, measured: str | Path, configs: dict[str, ConfigModel],
                      tokens: int) -> pl.DataFrame:
    """config, request, tier, lru_tier for ``df``'s requests of ``configs`` (a loaded
    measured file, ``request`` numbered per config in file order = sending order).

    CLIError when a request's pass or document differs from what the model's workload sent.
    """
    measured = Path(measured)
    present = set(df["config"].unique().to_list())
    chosen = {name: model for name, model in configs.items() if name in present}
    llama = {name: model for name, model in chosen.items() if model.model == "llamacpp"}
    parts = [_llamacpp(measured, llama)] if llama else []
    parts += [_two_tier(df, name, model, tokens) for name, model in chosen.items()
              if model.model == "two-tier"]
    schema = {"config": pl.String, "request": pl.Int64, "predicted_pass": pl.String,
              "predicted_doc": pl.Int64, "tier": TIER, "lru_tier": TIER}
    predicted = pl.concat([pl.DataFrame(schema=schema),
                           *(part.cast(schema) for part in parts)])
    joined = df.filter(pl.col("config").is_in(list(chosen))).select(
        "config", "request", "pass", "doc", "line").join(
        predicted, on=["config", "request"], how="left")
    bad = joined.filter((pl.col("pass") != pl.col("predicted_pass")).fill_null(True)
                        | (pl.col("doc") != pl.col("predicted_doc")).fill_null(True)).sort("line")
    if bad.height:
        row = bad.row(0, named=True)
        raise CLIError(f"{measured}:{row['line']}: config {row['config']} request "
                       f"{row['request']} is {row['pass']} doc {row['doc']}, but the "
                       f"{configs[row['config']].model} model's workload sends "
                       f"{row['predicted_pass']} doc {row['predicted_doc']} there")
    return joined.select("config", "request", "tier", "lru_tier")


def as_roles(attributed: pl.DataFrame, configs: dict[str, ConfigModel]) -> pl.DataFrame:
    """The configs with a role renamed to kvlab's (baseline, lmcache), the others dropped,
    for a TTFT fit; ``attributed`` unchanged when no config has a role."""
    renames = {name: ROLES[model.role] for name, model in configs.items() if model.role}
    if not renames:
        return attributed
    return (attributed.filter(pl.col("config").is_in(list(renames)))
            .with_columns(pl.col("config").replace_strict(renames)))


def agreement_lines(attributed: pl.DataFrame, server_tier: pl.DataFrame | None,
                    configs: dict[str, ConfigModel]) -> list[str]:
    """Per config: its model, and (where the file has the engine's own ``server_tier``) how
    many requests the model and plain LRU put in the engine's tier."""
    lines = []
    for name, model in configs.items():
        rows = attributed.filter(pl.col("config") == name)
        if rows.height == 0:
            continue
        text = f"{name}: {model.describe()}"
        if server_tier is not None:
            both = rows.join(server_tier, on=["config", "request"], how="inner").filter(
                pl.col("server_tier").is_not_null())
            if both.height:
                same = (pl.col("tier").cast(pl.String) == pl.col("server_tier")).sum()
                lru = (pl.col("lru_tier").cast(pl.String) == pl.col("server_tier")).sum()
                counts = both.select(same=same, lru=lru).row(0, named=True)
                text += (f": the engine's own tier on {counts['same']}/{both.height} requests"
                         f" (plain LRU: {counts['lru']}/{both.height})")
        lines.append(text)
    return lines
