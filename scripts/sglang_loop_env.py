"""The environment SGLang 0.5.23's scheduler files run in on CPU for
scripts/sglang_scheduler_unmodified.py: which of its modules load as shipped and which are
inert stubs, the numpy-backed torch, the run-time configuration getters at SGLang's defaults
(``Bag``s that fail on any field not set), the inert peripherals, and the few functions of
stubbed files compiled from their source. Loaded once per process (``load``), which installs
the stand-in torch: a process of its own.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import sglang_reference as ref  # noqa: E402
from stub_importer import Importer, _Any  # noqa: E402

#: SGLang packages replaced by inert stubs: the radix tree reference's list (kernels, metrics,
#: disaggregation, distributed...) less what the loop runs (allocators, memory pools, the
#: environment, the unified tree), plus model execution, sampling, grammars, LoRA, speculative
#: decoding, multimodal, platforms, server arguments, IPC structures, function calling, the
#: server's API models and parsers
STUBBED = tuple(s for s in ref.STUBBED if s not in (
    "sglang.srt.mem_cache.allocator", "sglang.srt.environ", "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.mem_cache.unified_cache")) + (
    "sglang.srt.dllm", "sglang.srt.lora", "sglang.srt.layers", "sglang.srt.model_executor",
    "sglang.srt.speculative", "sglang.srt.sampling", "sglang.srt.constrained",
    "sglang.srt.multimodal", "sglang.srt.hardware_backend", "sglang.srt.platforms",
    "sglang.srt.arg_groups", "sglang.srt.beam_search", "sglang.srt.server_args",
    "sglang.srt.managers.io_struct", "sglang.srt.function_call",
    # the server's API models and output parsers (scheduler.py imports the reasoning parser,
    # whose OpenAI protocol classes are pydantic models over xgrammar's types: with pydantic
    # installed, as llama-cpp-python's server brings it, they fail on the stubbed xgrammar)
    "sglang.srt.entrypoints", "sglang.srt.parser")


#: modules run as shipped inside the stubbed packages above (enums the loop reads)
REAL = ("sglang.srt.model_executor.forward_batch_info", "sglang.srt.speculative.spec_info",
        "sglang.srt.speculative.spec_registry", "sglang.srt.dllm.mixin.req",
        "sglang.srt.beam_search.batch_tail")
#: functions of the stubbed ``sglang/srt/utils/common.py`` these paths compute with: their
#: source compiled as shipped (``from_source``)
UTILS = ("ceil_div", "ceil_align", "get_num_new_pages")
#: the mixins of Scheduler and ScheduleBatch in stubbed packages (disaggregation, DLLM):
#: plain classes, so that an attribute the loop reads and this driver does not set fails
#: loudly instead of reading an inert stub
MIXINS = (("sglang.srt.disaggregation.decode", "SchedulerDisaggregationDecodeMixin"),
          ("sglang.srt.disaggregation.prefill", "SchedulerDisaggregationPrefillMixin"),
          ("sglang.srt.disaggregation.decode_schedule_batch_mixin",
           "ScheduleBatchDisaggregationDecodeMixin"),
          ("sglang.srt.dllm.mixin.scheduler", "SchedulerDllmMixin"))


class _Finder(ref._SGLangFinder):
    def __init__(self, source: Path) -> None:
        self.inner = Importer(source, top="sglang", stubbed=STUBBED)
        self.busy = False
        self.source = source

    def find_spec(self, fullname, path, target=None):
        if fullname in REAL:
            import importlib.util
            return importlib.util.spec_from_file_location(
                fullname, self.source.joinpath(*fullname.split(".")).with_suffix(".py"))
        return super().find_spec(fullname, path, target)


class Bag:
    """A configuration namespace (``get_schedule()``, ``get_memory()``, the model config...):
    the fields these paths read, at SGLang's defaults or this run's settings; reading any
    other field fails, naming it."""

    def __init__(self, name: str, **fields) -> None:
        self.__dict__.update(fields)
        self._name = name

    def __getattr__(self, field):
        if field.startswith("__"):
            raise AttributeError(field)
        raise AttributeError(f"{self._name}.{field}: not set by this driver")


class Inert(_Any):
    """A peripheral (metrics, streaming, tracing...): every call is a no-op returning a
    falsy inert value; counters added to stay inert."""

    def __add__(self, other):
        return self

    __radd__ = __mod__ = __add__

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Inert()

    def __call__(self, *args, **kwargs):
        return Inert()


def _identity(batch, *args, **kwargs):
    return batch


MODULES = {}


def from_source(module: str, name: str, namespace: dict):
    """Function ``name`` of SGLang's ``module`` (a stubbed package's file), its source text
    compiled as shipped in ``namespace``."""
    import ast
    path = ref.SOURCES.joinpath(*module.split(".")).with_suffix(".py")
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    node.decorator_list = []
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


def load():
    """SGLang's scheduler modules, imported once in this process over the fake torch."""
    if MODULES:
        return MODULES
    if not ref.sources_present():
        raise FileNotFoundError(f"SGLang {ref.VERSION} sources absent from {ref.SOURCES}")
    import fake_torch
    fake_torch.install()
    os.environ.setdefault("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", "python")
    sys.meta_path.insert(0, _Finder(ref.SOURCES))
    consensus = types.ModuleType("sglang.srt.utils.rank_consensus_checker")  # one rank:
    consensus.rank_consensus = lambda func=None, **kw: func or (lambda f: f)  # the identity
    sys.modules[consensus.__name__] = consensus
    import sglang_unified_reference as unified   # the one package __init__ the tree needs
    unified._run_init("sglang.srt.mem_cache.unified_cache.components")
    import sglang.srt.observability.scheduler_stage_metrics as stage_metrics  # a stub
    stage_metrics.scheduler_stage_method = lambda stage: (lambda method: method)
    import importlib
    for module, name in MIXINS:
        setattr(importlib.import_module(module), name, type(name, (), {}))
    import sglang.srt.managers.scheduler as sched
    import sglang.srt.managers.schedule_batch as sb
    import sglang.srt.managers.schedule_policy as sp
    import sglang.srt.mem_cache.radix_cache as rc
    import sglang.srt.mem_cache.memory_pool as mp
    import sglang.srt.mem_cache.allocator.token as tok
    import sglang.srt.mem_cache.allocator.paged as paged
    import sglang.srt.managers.scheduler_components.batch_result_processor as brp
    import sglang.srt.mem_cache.unified_radix_cache as urc
    import sglang.srt.mem_cache.cache_init_params as cip
    MODULES.update(sched=sched, sb=sb, sp=sp, rc=rc, mp=mp, tok=tok, paged=paged, brp=brp,
                   urc=urc, cip=cip)
    return MODULES


def configure(policy: str, max_running: int, chunk, max_prefill: int,
              conservativeness: float, page: int) -> None:
    """The run-time configuration getters every loaded SGLang module reads (SGLang's
    defaults, with this run's settings)."""
    bags = dict(
        get_schedule=Bag("schedule", schedule_policy=policy, prefill_max_requests=None,
                         schedule_low_priority_values_first=False,
                         schedule_conservativeness=conservativeness,
                         max_running_requests=max_running, chunked_prefill_size=chunk,
                         max_prefill_tokens=max_prefill, enable_prefill_delayer=False,
                         disable_priority_preemption=False, retraction_policy="length"),
        get_memory=Bag("memory", radix_eviction_policy="lru", enable_hisparse=False,
                       enable_flexkv=False, page_size=page),
        get_parallel=Bag("parallel", pp_max_micro_batch_size=max_running, pp_size=1,
                         dcp_enabled=False, attn_tp_rank=0, tp_size=1),
        get_disagg=Bag("disagg", disaggregation_mode="null",
                       disaggregation_decode_enable_offload_kvcache=False),
        get_exec=Bag("exec", features=Bag("exec.features",
                                          enable_encoder_swa_bounded_replay=False,
                                          enable_return_hidden_states=False,
                                          return_hidden_states_mode=None),
                     mamba=Bag("exec.mamba", enable_mamba_extra_buffer=False,
                               enable_mamba_extra_buffer_lazy=False)))
    bags["attention_backends"] = ("torch_native", "torch_native")   # the torch paths
    bags["support_triton"] = False
    bags["num_beam_member_rows"] = 0                                   # no beam search
    if "targets" not in MODULES:          # once: the loaded modules binding these names
        namespace = {"torch": sys.modules["torch"], "Optional": __import__("typing").Optional}
        for name in UTILS:
            MODULES[name] = from_source("sglang.srt.utils.common", name, namespace)
        MODULES["targets"] = [(module, name) for key, module in list(sys.modules.items())
                              if key.startswith("sglang") for name in (*bags, *UTILS)
                              if name in vars(module)]
    for module, name in MODULES["targets"]:
        setattr(module, name, MODULES[name] if name in UTILS
                else (lambda value: lambda *args: value)(bags[name]))


def unpatched() -> list:
    """Loaded SGLang modules whose configuration getters or utils are still inert stubs
    (imported after ``configure`` first ran): should be none."""
    from stub_importer import _Meta
    names = ("get_schedule", "get_memory", "get_parallel", "get_disagg", "get_exec",
             "attention_backends", "support_triton", "num_beam_member_rows", *UTILS)
    return [f"{key}.{name}" for key, module in list(sys.modules.items())
            if key.startswith("sglang") and getattr(module, "__file__", None)
            for name in names if isinstance(vars(module).get(name), _Meta)]
