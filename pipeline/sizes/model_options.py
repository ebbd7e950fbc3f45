"""The model options beside ``--model``: ``--model-config PATH`` (a Hugging Face
config.json, ``hf_config``), ``--kv-cache-dtype auto|fp8`` and ``--tensor-parallel-size N``.

KV bytes per token are per GPU, as vLLM sizes each worker's pages (``vllm/v1/
kv_cache_interface.py:586-594``, ``AttentionSpec``: KV heads of the worker x (K + V head
size) x the cache dtype's bytes, per layer): ``--kv-cache-dtype fp8`` halves them (vLLM's
``cache_dtype="fp8"``, one byte; ``auto`` is the model's bf16) and so doubles the tokens a
size holds; tensor parallelism keeps ``max(1, KV heads // N)`` heads per GPU
(``ModelShape.kv_heads_per_gpu``). Both apply to a model shape (``--model``,
``--model-config``); ``--kv-shape`` carries its own dtype and ``--kv-bytes-per-token`` is
already per GPU, so with either they are a usage error.
"""

from __future__ import annotations

import argparse

from pipeline.base.arguments import checked, positive_int
from pipeline.base.errors import UsageError
from pipeline.sizes.hf_config import read_model_config
from pipeline.sizes.model_presets import KVSize, ModelShape, model_shape

__all__ = ["KV_CACHE_DTYPES", "add_model_config_argument", "add_parallel_arguments",
           "shape_from_args", "kv_dtype", "tensor_parallel", "model_kv"]

#: ``--kv-cache-dtype`` -> the dtype of the KV formula (auto: the model's bf16)
KV_CACHE_DTYPES = {"auto": "bf16", "fp8": "fp8"}


def add_model_config_argument(group) -> None:
    """``--model-config PATH`` (into ``--model``'s mutually exclusive group)."""
    group.add_argument("--model-config", metavar="PATH", default=None,
                       type=checked(read_model_config),
                       help="a Hugging Face config.json (dense or mixture of experts) "
                            "instead of a preset: KV bytes per token and the roofline's shape")


def _one_stage(text: str) -> int:
    """``--pipeline-parallel-size``: 1 (one stage); more is refused, saying what is modelled."""
    stages = positive_int(text)
    if stages != 1:
        raise argparse.ArgumentTypeError(
            f"{stages}: pipeline parallelism is not modelled yet (one stage per replica; "
            "split a model with --tensor-parallel-size; docs/latency.md)")
    return stages


def add_parallel_arguments(group) -> None:
    """``--kv-cache-dtype``, ``--tensor-parallel-size`` and ``--pipeline-parallel-size``."""
    group.add_argument("--kv-cache-dtype", choices=tuple(KV_CACHE_DTYPES), default="auto",
                       help="vLLM's KV cache dtype: fp8 halves KV bytes per token (default "
                            "%(default)s: the model's bf16)")
    group.add_argument("--tensor-parallel-size", type=positive_int, default=1, metavar="N",
                       help="vLLM's tensor parallelism: weights and KV heads split N ways; "
                            "KV bytes and capacities are per GPU (default %(default)s)")
    group.add_argument("--pipeline-parallel-size", type=_one_stage, default=1, metavar="N",
                       help="vLLM's pipeline parallelism: only 1 (one stage) is modelled yet; "
                            "more is refused")


def kv_dtype(args: argparse.Namespace) -> str:
    """The KV formula's dtype of ``--kv-cache-dtype`` (bf16 when the command has none)."""
    return KV_CACHE_DTYPES[getattr(args, "kv_cache_dtype", None) or "auto"]


def tensor_parallel(args: argparse.Namespace) -> int:
    """``--tensor-parallel-size`` (1 when the command has none)."""
    return getattr(args, "tensor_parallel_size", None) or 1


def shape_from_args(args: argparse.Namespace) -> ModelShape | None:
    """The model shape of ``--model-config`` or ``--model`` (None: neither, or a KV-only
    preset); a usage error naming the option."""
    path = getattr(args, "model_config", None)
    try:
        if path is not None:
            return read_model_config(path)
        name = getattr(args, "model", None)
        return model_shape(name) if name is not None else None
    except ValueError as exc:
        option = "--model-config" if path is not None else "--model"
        if option == "--model":
            return None                       # a KV-only preset (MLA): no dense shape
        raise UsageError(f"{option}: {exc}") from None


def model_kv(args: argparse.Namespace) -> KVSize | None:
    """KV bytes per token per GPU of the model shape with ``--kv-cache-dtype`` and
    ``--tensor-parallel-size``; None when neither those nor ``--model-config`` are given
    (``kv_from_args`` then reads the preset as it always has). Usage errors name the
    option."""
    dtype, tp = kv_dtype(args), tensor_parallel(args)
    if getattr(args, "model_config", None) is None and dtype == "bf16" and tp == 1:
        return None
    changed = "--kv-cache-dtype" if dtype != "bf16" else "--tensor-parallel-size"
    for dest, option in (("kv_shape", "--kv-shape"), ("kv_bytes_per_token",
                                                       "--kv-bytes-per-token")):
        if getattr(args, dest, None) is not None:
            raise UsageError(f"{changed}: applies to --model or --model-config, not "
                             f"{option} (give its dtype and per-GPU heads there)")
    shape = shape_from_args(args)
    if shape is None:
        raise UsageError(f"{changed}: needs a model shape (--model PRESET of a dense model, "
                         f"or --model-config PATH)")
    try:
        return shape.kv(dtype, tp)
    except ValueError as exc:
        raise UsageError(f"--tensor-parallel-size {tp}: {exc}") from None
