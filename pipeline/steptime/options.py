"""The step-time options of a command: ``--latency roofline|FILE`` and the GPU preset; the
load (``add_load_arguments``: ``--speed``, ``--rate``, ``--concurrency``, ``--seed``).

``add_latency_arguments(parser)`` adds them; ``latency_from_args(args)`` returns the chosen
``StepTimeModel`` (None without ``--latency``), or raises CLIError naming the option. The
roofline's model shape is ``--model-shape``, else the ``--model`` preset (one of them is
required: a usage error naming ``--model`` otherwise, never a silent default).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.base.arguments import non_negative_float, non_negative_int, positive_float, \
    positive_int
from pipeline.base.errors import CLIError, UsageError
from pipeline.sizes.units import model_shape, parse_model_shape
from pipeline.steptime.cost import StepTimeModel
from pipeline.steptime.fitted import load_latency
from pipeline.steptime.gpus import GPUS, custom_gpu, gpu_preset
from pipeline.steptime.roofline import DEFAULT_OVERHEAD_MS, Roofline

__all__ = ["add_latency_arguments", "add_load_arguments", "latency_from_args",
           "check_roofline_model", "load_list"]

GPU_NAMES = [gpu.name.split()[0] for gpu in GPUS.values()] + ["custom"]


def add_latency_arguments(parser: argparse.ArgumentParser, latency: bool = True) -> None:
    """--latency (unless the command has its own), --gpu-type and the figures that override
    or define a GPU."""
    group = parser.add_argument_group(
        "step time (turns each batch into milliseconds: the time clock)")
    if latency:
        group.add_argument("--latency", metavar="roofline|FILE", default=None,
                           help="roofline: from the model's shape and the GPU's peaks (a "
                                "lower bound, labelled roofline); FILE: fitted coefficients "
                                "written by fit (JSON, kind fitted-step-time)")
    group.add_argument("--gpu-type", default=None, metavar="NAME",
                       help=f"GPU preset of the roofline and of --gpu-memory-utilization: "
                            f"{', '.join(GPU_NAMES)} (default H100 for the roofline)")
    group.add_argument("--gpu-tflops", type=positive_float, metavar="TFLOPS",
                       help="peak dense bf16 TFLOP/s (custom, or overrides the preset)")
    group.add_argument("--gpu-fp8-tflops", type=positive_float, metavar="TFLOPS",
                       help="peak dense fp8 TFLOP/s (custom, or overrides the preset)")
    group.add_argument("--gpu-hbm-gbps", type=positive_float, metavar="GB/S",
                       help="memory bandwidth in GB/s (custom, or overrides the preset)")
    group.add_argument("--host-link-gbps", type=positive_float, metavar="GB/S",
                       help="host link for CPU-tier reloads in GB/s (custom, or overrides)")
    group.add_argument("--weights", choices=("bf16", "fp8"), default="bf16",
                       help="weight dtype of the roofline (default %(default)s)")
    group.add_argument("--step-overhead-ms", type=non_negative_float,
                       default=DEFAULT_OVERHEAD_MS, metavar="MS",
                       help="fixed roofline overhead per step, an assumption "
                            "(default %(default)s)")
    group.add_argument("--model-shape", metavar="L,HIDDEN,INTER,HEADS,KV_HEADS,VOCAB[,tied]",
                       help="the roofline's model shape instead of the --model preset")


def load_list(text: str) -> list[float]:
    """argparse type: one number > 0 or a comma list of them."""
    from pipeline.steptime.curves import parse_loads
    try:
        return [load.value for load in parse_loads("rate", text)]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_load_arguments(group, lists: bool) -> None:
    """The load: ``--speed``, ``--rate`` or ``--concurrency``, and ``--seed`` (of --rate).
    ``lists`` (``simulate``): each a comma list (curves), argparse refuses two of them;
    otherwise (``plan``) one value each, the command refusing two."""
    one = group.add_mutually_exclusive_group() if lists else group
    number, count = (load_list, load_list) if lists else (positive_float, positive_int)
    curves = "; a comma list: curves" if lists else ""
    one.add_argument("--speed", type=number, default=None, metavar="X[,X...]" if lists else "X",
                     help=f"divide the trace's arrival times by X (default 1{curves})")
    one.add_argument("--rate", type=number, default=None,
                     help=f"Poisson arrivals, R requests per "
                          f"{'step, or per second on the time clock' if lists else 'second'} "
                          f"(seeded by --seed{curves})")
    one.add_argument("--concurrency", type=count, default=None,
                     help=f"closed loop: K requests running or waiting at any time{curves}")
    group.add_argument("--seed", type=non_negative_int, default=0,
                       help="seed of --rate (default %(default)s)")


def _gpu(args: argparse.Namespace):
    try:
        name = args.gpu_type or "H100"
        base = None if name.lower() == "custom" else gpu_preset(name)
        return custom_gpu(base, bf16_tflops=args.gpu_tflops, fp8_tflops=args.gpu_fp8_tflops,
                          hbm_gbps=args.gpu_hbm_gbps, host_link_gbps=args.host_link_gbps)
    except ValueError as exc:
        raise CLIError(f"--gpu-type: {exc}") from None


def check_roofline_model(args: argparse.Namespace) -> None:
    """The roofline's model is named: --model-shape, or --model (a usage error naming
    --model otherwise: a TTFT for an unnamed model is never assumed)."""
    if getattr(args, "model_shape", None):
        return
    if getattr(args, "kv_shape", None) or getattr(args, "kv_bytes_per_token", None):
        raise CLIError("--latency roofline: --kv-shape/--kv-bytes-per-token give no model "
                       "shape; use --model PRESET or --model-shape")
    if getattr(args, "model", None) is None:
        raise UsageError("--latency roofline needs --model PRESET (or --model-shape): TTFT "
                         "depends on the model, none is assumed")


def _shape(args: argparse.Namespace):
    check_roofline_model(args)
    if getattr(args, "model_shape", None):
        try:
            return parse_model_shape(args.model_shape)
        except ValueError as exc:
            raise CLIError(f"--model-shape: {exc}") from None
    try:
        return model_shape(args.model)
    except ValueError as exc:
        raise CLIError(f"--model: {exc}") from None


def latency_from_args(args: argparse.Namespace) -> StepTimeModel | None:
    """The step-time model ``--latency`` chose, or None; CLIError naming the option."""
    choice = getattr(args, "latency", None)
    if choice is None:
        return None
    choice = str(choice)
    if choice.lower() == "roofline":
        gpu, shape = _gpu(args), _shape(args)
        try:
            return Roofline(shape, gpu, args.step_overhead_ms, args.weights)
        except ValueError as exc:
            raise CLIError(f"--weights: {exc}") from None
    try:
        return load_latency(Path(choice))
    except ValueError as exc:
        raise CLIError(f"--latency: {exc}") from None
