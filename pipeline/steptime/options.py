"""The step-time options of a command: ``--latency roofline|FILE`` and the GPU preset; the
load (``add_load_arguments``: ``--speed``, ``--rate``, ``--concurrency``, ``--seed``).

``add_latency_arguments(parser)`` adds them; ``latency_from_args(args)`` returns the chosen
``StepTimeModel`` (None without ``--latency``), or raises CLIError naming the option. The
roofline's model shape is ``--model-shape``, else the ``--model`` preset (one of them is
required: a usage error naming ``--model`` otherwise, never a silent default).
"""

from __future__ import annotations

import argparse

from pipeline.base.arguments import non_negative_float, non_negative_int, positive_float, \
    positive_int, unit_ratio
from pipeline.base.errors import UsageError
from pipeline.steptime.cost import StepTimeModel
from pipeline.sizes.gpus import GPU_NAMES
from pipeline.steptime.registry import step_time_model
from pipeline.steptime.roofline import DEFAULT_OVERHEAD_MS, PROFILED, check_roofline_model

__all__ = ["add_latency_arguments", "add_load_arguments", "add_slo_arguments",
           "latency_from_args", "check_roofline_model", "load_list", "slo_options"]


def add_latency_arguments(parser: argparse.ArgumentParser, latency: bool = True,
                          fitted: bool = False) -> None:
    """--latency (unless the command has its own), --gpu-type and the figures that override
    or define a GPU; ``fitted``: ``--mfu-prefill``/``--mbu-decode`` hold a factor that
    ``fit`` would otherwise fit."""
    group = parser.add_argument_group(
        "step time (turns each batch into milliseconds: the time clock)")
    if latency:
        group.add_argument("--latency", metavar="roofline|FILE|profile:DIR", default=None,
                           help="roofline: from the model's shape and the GPU's peaks "
                                "scaled by measured efficiency (--mfu-prefill, --mbu-decode; "
                                "labelled roofline); FILE: fitted coefficients "
                                "written by fit (JSON, kind fitted-step-time); profile:DIR: "
                                "vidur-format per-operation profiles (mlp.csv, "
                                "attention.csv, all_reduce.csv)")
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
    for flag, what in (("--mfu-prefill", "peak FLOP/s a compute-bound batch reaches"),
                       ("--mbu-decode", "peak memory bandwidth a memory-bound batch reaches")):
        group.add_argument(flag, type=_ratio_or_profiled, nargs="?", const=PROFILED,
                           default=None,
                           metavar="F", help=f"the roofline's share of {what} (0 < F <= 1); "
                           + ("held, not fitted: at F, or given alone at vidur's profile of "
                              "the GPU preset (H100, A100); default: fitted" if fitted else
                              "given alone: measured on the GPU preset by vidur's profiles "
                              "(H100, A100); default: that profile (H200: the H100's; other "
                              "GPUs: their mean, labelled assumed); 1: the peak (a lower "
                              "bound)"))
    group.add_argument("--model-shape", metavar="L,HIDDEN,INTER,HEADS,KV_HEADS,VOCAB[,tied]",
                       help="the roofline's model shape instead of the --model preset")


def add_slo_arguments(parser: argparse.ArgumentParser) -> None:
    """``--slo-ttft-ms`` and ``--slo-tpot-ms``: goodput, as ``vllm bench serve --goodput``."""
    group = parser.add_argument_group(
        "goodput (requests meeting every SLO given, as vllm bench serve --goodput; the time "
        "clock)")
    group.add_argument("--slo-ttft-ms", type=positive_float, metavar="MS", default=None,
                       help="a request is good only if its TTFT <= MS")
    group.add_argument("--slo-tpot-ms", type=positive_float, metavar="MS", default=None,
                       help="a request is good only if its TPOT <= MS (one output token: "
                            "TPOT 0, as vLLM counts it)")


def slo_options(args: argparse.Namespace, timed: bool) -> tuple[float | None, float | None]:
    """(--slo-ttft-ms, --slo-tpot-ms); a UsageError naming the option when one is given
    without the time clock (TPOT and goodput need milliseconds: absent on --clock steps)."""
    slos = (getattr(args, "slo_ttft_ms", None), getattr(args, "slo_tpot_ms", None))
    for option, value in zip(("--slo-ttft-ms", "--slo-tpot-ms"), slos):
        if value is not None and not timed:
            raise UsageError(f"{option}: goodput needs the time clock (--latency roofline or "
                             f"FILE); --clock steps has no TTFT or TPOT in milliseconds")
    return slos


def _ratio_or_profiled(text: str) -> float | str:
    """argparse type of --mfu-prefill/--mbu-decode: a share in (0, 1], or PROFILED (the
    option given alone)."""
    return text if text == PROFILED else unit_ratio(text)


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


def latency_from_args(args: argparse.Namespace) -> StepTimeModel | None:
    """The step-time model ``--latency`` chose (``registry.step_time_model``), or None."""
    choice = getattr(args, "latency", None)
    model = None if choice is None else step_time_model(str(choice), args)
    for option in ("--mfu-prefill", "--mbu-decode"):
        if getattr(args, option[2:].replace("-", "_"), None) is not None and \
                not hasattr(model, "mfu"):
            raise UsageError(f"{option}: scales the roofline's peaks; give --latency roofline")
    return model
