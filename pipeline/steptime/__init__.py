"""Step-time models: one executed batch (a ``StepRecord``) -> milliseconds.

``Roofline`` (a model's shape on a GPU preset at measured efficiency, labelled roofline) and
``Linear`` (fitted coefficients, ``load_latency`` reads ``fit``'s JSON), registered in
``registry`` (``--latency``); ``alone`` prices a request alone and checks that a model backs
a plan; ``regression`` is the fits' least squares; ``metrics`` turns a timed run into
per-request and per-run figures, including vLLM's own prefix-cache hit rates; ``curves``
runs a grid of GPU capacities x loads.
"""

from pipeline.steptime.cost import StepCost, StepTimeModel, step_cost
from pipeline.steptime.fitted import COEFFICIENTS, Linear, load_latency
from pipeline.sizes.gpus import GPUS, GpuPreset, custom_gpu, gpu_preset
from pipeline.steptime.roofline import Roofline

__all__ = ["StepCost", "StepTimeModel", "step_cost", "COEFFICIENTS", "Linear", "load_latency",
           "GPUS", "GpuPreset", "custom_gpu", "gpu_preset", "Roofline"]
