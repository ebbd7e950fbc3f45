"""Paths and the lab's constants, in one place: every stage imports them from here.

The lab's numbers are defined by the kvlab contract (``kvlab/scenario.py``,
``kvlab/make_exports.py``); this module re-exports them under one set of names and adds the
pipeline's folders. It imports nothing from ``pipeline``, so any module may import it.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from kvlab import make_exports
from kvlab.scenario import run as _lab_scenario
from kvlab.summarize import CONFIGS

ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = ROOT / "data"
EVENTS_DIR = DATA_DIR / "events"
EXPORTS_DIR = DATA_DIR / "exports"          # exports of any workload other than the lab's
REPORTS_DIR = ROOT / "reports"
REPORT_PATH = REPORTS_DIR / "index.html"
RUN_EVENTS_DIR = EVENTS_DIR / "run"          # events of any run other than the lab's
RUN_REPORT_PATH = REPORTS_DIR / "run.html"   # report of any run other than the lab's
KVLAB_DIR = Path(make_exports.HERE)          # the lab's exports (the contract's folder)
BUNDLED_MEASURED = Path(make_exports.BUNDLED_MEASURED)
REAL_MEASURED = Path(make_exports.REAL_MEASURED)

_DEFAULTS = {name: p.default for name, p in inspect.signature(_lab_scenario).parameters.items()}
#: The lab's workload and setup, as kvlab/scenario.py defines them.
LAB_DOCS: int = _DEFAULTS["docs"]                       # 10 documents
LAB_TOKENS: int = _DEFAULTS["tokens"]                   # 5011 KV tokens each
LAB_PASSES: tuple[str, ...] = tuple(_DEFAULTS["passes"])  # fwd, fwd, rev
LAB_GPU: int = _DEFAULTS["gpu"]                         # 21520 tokens of GPU KV cache
LAB_CPU: int = make_exports.OFFLOAD["cpu"]              # 56000 tokens of CPU offload
GPU_CLIFF_CAPACITIES: tuple[int, ...] = make_exports.GPU_CLIFF_CAPACITIES
CPU_CLIFF_GPU: int = make_exports.CPU_CLIFF_GPU
CPU_CLIFF_CAPACITIES: tuple[int, ...] = make_exports.CPU_CLIFF_CAPACITIES

#: The two measured configs (kvlab/summarize.py): GPU cache only, and GPU + LMCache's CPU tier.
BASELINE, OFFLOADED = CONFIGS
