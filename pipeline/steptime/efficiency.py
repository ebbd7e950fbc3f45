"""The roofline's efficiency factors: the share of peak FLOP/s a compute-bound batch reaches
(``--mfu-prefill``) and of peak memory bandwidth a memory-bound one reaches
(``--mbu-decode``), measured, never assumed from the peaks.

``profile_efficiency(csv, gpu)`` reads one of vidur's per-operation profiles (``mlp.csv``:
one decoder layer's q/k/v, o, gate/up and down projections timed on a GPU for 1..4096
tokens, tensor parallel 1..8; ``data/profiles/vidur/``) and returns the median over its rows
of: with at least ``PREFILL_TOKENS`` tokens, the linear layers' FLOPs (2 x weights per GPU x
tokens) / their measured time / the preset's peak; with at most ``DECODE_TOKENS``, their
weight bytes per GPU (bf16) / the time / the preset's memory bandwidth. ``EFFICIENCY`` holds
those medians over the committed sample (Llama-2-7B and -70B, both GPUs;
``tests/test_efficiency.py`` recomputes them): the roofline's defaults (``default_efficiency``)
and the value of ``--mfu-prefill`` / ``--mbu-decode`` given alone. The H200 (the H100's
compute die) takes the H100's; any other GPU (L40S, L4, a custom or modified preset) the
mean of the two, labelled as assumed. ``--mfu-prefill 1 --mbu-decode 1``: the peaks.

``fit --vllm-bench`` writes the factors it fitted as a JSON of kind ``EFFICIENCY_KIND``
(read by ``steptime.efficiency_file``).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pipeline.sizes.gpus import GpuPreset

__all__ = ["EFFICIENCY", "EFFICIENCY_KIND", "PREFILL_TOKENS", "DECODE_TOKENS",
           "FACTORS", "LINEAR_OPERATIONS", "profile_rows", "profile_efficiency",
           "efficiency_of", "default_efficiency"]

#: the JSON kind of ``fit --vllm-bench``'s output (version 1)
EFFICIENCY_KIND = "roofline-efficiency"
#: its factors: the document's key and the option it stands for
FACTORS = (("mfu_prefill", "--mfu-prefill"), ("mbu_decode", "--mbu-decode"))

PREFILL_TOKENS, DECODE_TOKENS = 1024, 8
LINEAR_OPERATIONS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
SOURCE = ("vidur's measured linear-layer profiles (microsoft/vidur 7d47513, "
          "data/profiling/compute/GPU/meta-llama/Llama-2-{7b,70b}-hf/mlp.csv, MIT; "
          "data/profiles/vidur/)")
#: gpu preset key -> (MFU of >= 1024-token batches, MBU of <= 8-token batches), medians
EFFICIENCY = {"h100": (0.691, 0.754), "a100": (0.715, 0.723)}


def profile_rows(path: str | Path, gpu: GpuPreset) -> pl.DataFrame:
    """The profile's rows with ``mfu`` and ``mbu`` (each row's achieved share of ``gpu``'s
    peaks) of its linear layers."""
    frame = pl.read_csv(path)
    first = frame.row(0, named=True)
    hidden, inter = first["n_embd"], first["n_expanded_embd"]
    heads, kv_heads = first["n_head"], first["n_kv_head"]
    head_dim = hidden // heads
    mlp = (3 if first["use_gated_mlp"] else 2) * hidden * inter
    weights = (hidden * (heads + 2 * kv_heads) * head_dim + hidden * hidden + mlp) \
        / pl.col("num_tensor_parallel_workers")
    seconds = sum(pl.col(f"time_stats.{op}.median") for op in LINEAR_OPERATIONS) / 1e3
    return frame.with_columns(
        mfu=2 * weights * pl.col("num_tokens") / seconds / gpu.flops("bf16"),
        mbu=2 * weights / seconds / (gpu.hbm_gbps * 1e9))


def profile_efficiency(paths: list[str | Path], gpu: GpuPreset) -> tuple[float, float]:
    """(MFU, MBU) of the profiles at ``paths`` on ``gpu`` (module docstring)."""
    rows = pl.concat([profile_rows(path, gpu) for path in paths])
    mfu = rows.filter(pl.col("num_tokens") >= PREFILL_TOKENS)["mfu"].median()
    mbu = rows.filter(pl.col("num_tokens") <= DECODE_TOKENS)["mbu"].median()
    return float(mfu), float(mbu)


def efficiency_of(gpu: GpuPreset, which: int) -> tuple[float, str]:
    """(the profiled MFU (``which`` 0) or MBU (1) of ``gpu``, its source); ValueError for a
    GPU with no profile."""
    key = gpu.name.split()[0].lower()
    if key not in EFFICIENCY or "modified" in gpu.name:
        raise ValueError(f"no measured profile for {gpu.name} (profiles: "
                         f"{', '.join(k.upper() for k in EFFICIENCY)}); give a number")
    return EFFICIENCY[key][which], SOURCE


def default_efficiency(gpu: GpuPreset, which: int) -> tuple[float, str]:
    """(the MFU (``which`` 0) or MBU (1) the roofline takes when none is given, its source):
    the GPU's profile, the H100's for an H200, else the profiles' mean (module docstring)."""
    try:
        return efficiency_of(gpu, which)
    except ValueError:
        pass
    if gpu.name.split()[0].lower() == "h200" and "modified" not in gpu.name:
        return EFFICIENCY["h100"][which], f"the H100's (the H200's compute die) {SOURCE}"
    mean = round(sum(pair[which] for pair in EFFICIENCY.values()) / len(EFFICIENCY), 3)
    return mean, (f"assumed: the mean of the {' and '.join(k.upper() for k in EFFICIENCY)} "
                  f"profiles, none measured on {gpu.name}, {SOURCE}")
