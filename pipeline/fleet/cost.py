"""What a fleet configuration costs: GPUs by the hour, its CPU tier and disk by the
GiB-hour, and per million output tokens at the load it served.

Prices come from a price file (default ``data/prices.json``: on-demand list prices, each
with its source and the date it was read; editable) or the options, which override it.
A point's ``usd_per_hour`` = instances x GPUs per instance x the GPU's price + the CPU tier's
GiB (per instance, or one shared pool) x the memory price + disk GiB x the disk price;
``usd_per_million_output_tokens`` = ``usd_per_hour`` / (output tokens the fleet served per
hour, over the run from the first arrival to the last finish) x 10^6. A point whose GPU KV
per instance exceeds what vLLM would allocate on that GPU for the model
(``pipeline.sizes.vllm_memory``, at vLLM's default ``--gpu-memory-utilization`` 0.9) does not
fit (``fits_gpu`` False) and is never an answer.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from pipeline.base.arguments import non_negative_float
from pipeline.base.errors import CLIError, UsageError
from pipeline.fleet.plan import Memory, best_points, memory_columns

__all__ = ["PRICES_FILE", "Prices", "read_prices", "prices_for", "with_cost", "cheapest",
           "COST_COLUMNS", "COST_DESTS", "add_cost_arguments", "cost_requested",
           "prices_from_args"]

PRICES_FILE = Path(__file__).resolve().parents[2] / "data" / "prices.json"
#: the columns ``with_cost`` adds
COST_COLUMNS = ("gpu_usd_per_hour", "memory_usd_per_hour", "usd_per_hour",
                "usd_per_million_output_tokens", "fits_gpu")
GIB_BYTES = 1 << 30
_SECTIONS = ("gpu_per_hour", "cpu_memory_per_gib_hour", "disk_per_gib_hour")


@dataclass(frozen=True)
class Prices:
    """USD prices of one configuration's parts, and where each came from."""

    gpu: str
    gpu_per_hour: float
    cpu_per_gib_hour: float
    disk_per_gib_hour: float = 0.0
    gpus_per_instance: int = 1
    sources: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """One line per price: the figure and its source."""
        figures = {"gpu": f"{self.gpu} ${self.gpu_per_hour:g}/hour",
                   "cpu": f"CPU memory ${self.cpu_per_gib_hour:g}/GiB-hour",
                   "disk": f"disk ${self.disk_per_gib_hour:g}/GiB-hour"}
        return [f"{figures[key]} ({self.sources.get(key, 'given')})" for key in figures]


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{where}: expected a price >= 0 in USD, got {value!r}")
    return float(value)


def _entry(section: dict, where: str) -> tuple[float, str]:
    if not isinstance(section, dict) or "usd" not in section:
        raise ValueError(f"{where}: expected an object with \"usd\" and \"source\"")
    source = section.get("source") or "no source given"
    read = section.get("read")
    return _number(section["usd"], where), source + (f", read {read}" if read else "")


def read_prices(path: Path) -> dict:
    """A price file as a dict; ValueError (one line naming the file) when it is unreadable
    or lacks a section."""
    try:
        document = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the price file ({exc.strerror or exc})") \
            from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    if not isinstance(document, dict) or document.get("kind") != "kvlab-prices":
        raise ValueError(f"{path}: not a kvlab price file (\"kind\": \"kvlab-prices\")")
    missing = [name for name in _SECTIONS if name not in document]
    if missing:
        raise ValueError(f"{path}: no \"{missing[0]}\" section")
    return document


def prices_for(gpu: str, path: Path | None = None, *, gpu_per_hour: float | None = None,
               cpu_per_gib_hour: float | None = None, disk_per_gib_hour: float | None = None,
               gpus_per_instance: int = 1) -> Prices:
    """The prices of ``gpu`` from the price file, each replaced by the given figure;
    ValueError (one line) naming the file and the GPU it lacks."""
    path = PRICES_FILE if path is None else Path(path)
    given = {"gpu": gpu_per_hour, "cpu": cpu_per_gib_hour, "disk": disk_per_gib_hour}
    figures, sources = {}, {}
    document = read_prices(path) if None in given.values() else None
    for key, section in zip(given, _SECTIONS):
        if given[key] is not None:
            figures[key], sources[key] = float(given[key]), "given on the command line"
            continue
        part = document[section]
        if key == "gpu":
            known = {name.lower(): name for name in part}
            if gpu.lower() not in known:
                raise ValueError(f"{path}: no price for GPU {gpu} (it has "
                                 f"{', '.join(part) or 'none'}): give --gpu-cost-per-hour")
            part = part[known[gpu.lower()]]
        figures[key], sources[key] = _entry(part, f"{path}: {section}")
    return Prices(gpu, figures["gpu"], figures["cpu"], figures["disk"], gpus_per_instance,
                  sources)


def with_cost(fleet: pl.DataFrame, memory: Memory, prices: Prices,
              kv_tokens_per_gpu: int | None = None, disk_gib: float = 0.0) -> pl.DataFrame:
    """``fleet``'s points with ``memory_columns`` and ``COST_COLUMNS``; ``kv_tokens_per_gpu``:
    the most KV tokens one instance's GPU holds (None: every point fits); ``disk_gib``: a
    disk tier per instance with a tier (``instances``: a disaggregated fleet's prefill
    engines)."""
    n = pl.col("instances")
    if "decode_instances" in fleet.columns:          # a disaggregated fleet's GPUs
        n = n + pl.col("decode_instances")
    cpu_gib = pl.col("cpu_gib").fill_null(0.0)
    points = memory_columns(fleet, memory)
    tokens_per_instance = pl.col("gpu_blocks") * memory.block_size
    per_second = pl.col("output_tokens") * pl.col("throughput_rps") / pl.col("requests")
    return points.with_columns(
        gpu_usd_per_hour=n * prices.gpus_per_instance * prices.gpu_per_hour,
        memory_usd_per_hour=cpu_gib * prices.cpu_per_gib_hour
        + pl.col("instances") * disk_gib * prices.disk_per_gib_hour,
        fits_gpu=pl.lit(True) if kv_tokens_per_gpu is None
        else tokens_per_instance <= kv_tokens_per_gpu,
    ).with_columns(
        usd_per_hour=pl.col("gpu_usd_per_hour") + pl.col("memory_usd_per_hour"),
    ).with_columns(
        usd_per_million_output_tokens=pl.col("usd_per_hour") / (per_second * 3600.0) * 1e6)


def cheapest(points: pl.DataFrame, ttft_p90_ms: float | None = None,
             hit_ratio: float | None = None, tpot_p90_ms: float | None = None,
             goodput: float | None = None) -> pl.DataFrame:
    """Per (router, load): the cheapest point (``with_cost``'s) that fits and meets the
    targets; ties: fewer instances, then less memory."""
    return best_points(points.filter(pl.col("fits_gpu")), ttft_p90_ms, hit_ratio,
                       rank=("usd_per_hour", "instances", "total_tokens"),
                       extra=COST_COLUMNS, every=points, tpot_p90_ms=tpot_p90_ms,
                       goodput=goodput)



def add_cost_arguments(parser: argparse.ArgumentParser) -> None:
    """``--cost`` and the prices that override the price file."""
    group = parser.add_argument_group(
        "cost (what each configuration costs; any of these turns --cost on)")
    group.add_argument("--cost", action="store_true",
                       help="price every point ($ per hour, $ per million output tokens) "
                            "from --prices; a plan answers the cheapest point meeting the "
                            "target instead of the smallest memory")
    group.add_argument("--prices", type=Path, metavar="FILE",
                       help=f"price file (default {PRICES_FILE.relative_to(PRICES_FILE.parents[1])}"
                            ": on-demand list prices with their sources and dates)")
    group.add_argument("--gpu-cost-per-hour", type=non_negative_float, metavar="USD",
                       help="price of one GPU of --gpu-type per hour (default: the price file's)")
    group.add_argument("--cpu-memory-cost-per-gib-hour", type=non_negative_float,
                       metavar="USD", help="price of a GiB of CPU memory (the CPU tier) per "
                                           "hour (default: the price file's)")
    group.add_argument("--disk-cost-per-gib-hour", type=non_negative_float, metavar="USD",
                       help="price of a GiB of disk (a disk tier) per hour (default: the "
                            "price file's)")


#: the dests of ``add_cost_arguments``
COST_DESTS = ("cost", "prices", "gpu_cost_per_hour", "cpu_memory_cost_per_gib_hour",
              "disk_cost_per_gib_hour")


def cost_requested(args: argparse.Namespace) -> bool:
    """``--cost`` or any price option."""
    return any(getattr(args, dest, None) not in (None, False) for dest in COST_DESTS)


def prices_from_args(args: argparse.Namespace) -> tuple[Prices, int | None]:
    """(the prices of ``--gpu-type``'s GPU, default H100 as the roofline's, x
    ``--tensor-parallel-size`` GPUs per instance; the most KV tokens vLLM allocates on
    one instance for the model at utilization 0.9, None without a model); CLIError (one
    line) naming the price file or the option."""
    from pipeline.sizes.gpus import gpu_preset
    from pipeline.sizes.model_options import shape_from_args, tensor_parallel
    from pipeline.sizes.model_presets import DTYPE_BYTES, model_shape, preset
    from pipeline.sizes.units import kv_from_args
    from pipeline.sizes.vllm_memory import vllm_kv_memory
    name = getattr(args, "gpu_type", None) or "H100"
    gpus = tensor_parallel(args)                   # an instance pays for all its GPUs
    try:
        prices = prices_for(name, args.prices, gpu_per_hour=args.gpu_cost_per_hour,
                            cpu_per_gib_hour=args.cpu_memory_cost_per_gib_hour,
                            disk_per_gib_hour=args.disk_cost_per_gib_hour,
                            gpus_per_instance=gpus)
    except ValueError as exc:
        if args.prices is None:              # the bundled file: the options are the fix
            raise UsageError(f"--gpu-type {name}: {exc}") from None
        raise CLIError(f"--prices {exc}") from None
    model, config = getattr(args, "model", None), getattr(args, "model_config", None)
    if not (model or config) or name.lower() == "custom":
        return prices, None
    gpu = gpu_preset(name)
    try:
        shape = shape_from_args(args) if config else model_shape(model)
        kv = (kv_from_args(args) if config or gpus > 1
              or getattr(args, "kv_cache_dtype", "auto") not in (None, "auto")
              else preset(model))
        memory = vllm_kv_memory(gpu.name, int(gpu.memory_gb * GIB_BYTES), 0.9, shape, kv,
                                args.block_size,
                                DTYPE_BYTES[getattr(args, "weights", None) or "bf16"],
                                tensor_parallel=gpus)
    except ValueError as exc:
        raise CLIError(f"--cost: {model or config} on {gpus} x {gpu.name}: {exc}") from None
    return prices, memory.tokens
