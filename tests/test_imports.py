"""Every pipeline module imports in a fresh interpreter (``__main__`` aside: importing it runs
the CLI), the import graph has no cycle, and it follows the layers.

The graph is read from the source (``ast``), counting every ``pipeline`` import wherever it
stands (a function-level import that dodges a cycle at run time is still a cycle).

The layers, lowest first (``LAYERS``): parts (units, tiers, schemas, outputs) -> workloads
-> models -> stages (``simulate.py``, ``sweeps.py``, ``measured.py``, ``report.py`` and their
helpers, the charts) -> commands. A module imports only modules of its own layer or below
(a command's ``if __name__ == "__main__":`` block, which calls the CLI, aside); the report
and its charts import no model at all, so the page is a function of the frames it is given.
Every module is placed in a layer: a new one must be added here.
"""

from __future__ import annotations

import ast
import functools
import pkgutil
import subprocess
import sys
from importlib.util import find_spec

import pipeline
from conftest import ROOT


def pipeline_modules() -> list[str]:
    """Every module and package under pipeline/, by dotted name."""
    found = ["pipeline"] + [info.name for info in
                            pkgutil.walk_packages(pipeline.__path__, prefix="pipeline.")]
    return sorted(found)


def _main_guard(node: ast.AST) -> bool:
    """True for ``if __name__ == "__main__":``."""
    test = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__"
                    for c in test.comparators))


@functools.cache
def _imported_names(name: str) -> tuple[frozenset[str], frozenset[str]]:
    """Every dotted name module ``name`` imports, anywhere in its source: (outside its
    ``if __name__ == "__main__":`` blocks, inside them). Read once for all the tests."""
    spec = find_spec(name)
    tree = ast.parse(open(spec.origin, encoding="utf-8").read(), spec.origin)
    package = name if spec.submodule_search_locations else name.rpartition(".")[0]
    outside: set[str] = set()
    inside: set[str] = set()
    for statement in tree.body:
        found = inside if _main_guard(statement) else outside
        for node in ast.walk(statement):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parent = ".".join(parts[:len(parts) - node.level + 1])
                    base = f"{parent}.{base}" if base else parent
                found.update([base] + [f"{base}.{alias.name}" for alias in node.names])
    return frozenset(outside), frozenset(inside)


def imports_of(name: str, modules: set[str], skip_main: bool = False) -> set[str]:
    """The pipeline modules that module ``name`` imports (anywhere in its source; with
    ``skip_main``, not inside an ``if __name__ == "__main__":`` block)."""
    outside, inside = _imported_names(name)
    targets = outside if skip_main else outside | inside
    return {target for target in targets if target in modules} - {name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle in ``graph`` as a list of nodes (first == last), or None: depth-first search."""
    state: dict[str, str] = {}          # absent: unvisited; "open": on the path; "done"
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_find_cycle_finds_one_and_only_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_import_graph_has_no_cycle():
    modules = pipeline_modules()
    graph = {name: imports_of(name, set(modules)) for name in modules}
    assert graph["pipeline.commands.run"] >= {"pipeline.base.config", "pipeline.report"}  # walks
    assert "pipeline.charts.gpu_cliff" in graph["pipeline.report"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_every_module_imports_in_a_fresh_interpreter():
    modules = [name for name in pipeline_modules() if not name.endswith(".__main__")]
    assert len(modules) > 20
    script = ("import importlib, sys\n"
              "for name in sys.argv[1:]:\n"
              "    importlib.import_module(name)\n")
    proc = subprocess.run([sys.executable, "-c", script, *modules], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


# --------------------------------------------------------------------------- the layers

#: layer -> its modules: an exact dotted name, or ``prefix.*`` for a package's modules
#: (the longest match wins; exact names before patterns).
LAYERS: dict[str, tuple[str, ...]] = {
    "parts": (
        "pipeline", "pipeline.entry", "pipeline.base.config", "pipeline.base.errors", "pipeline.base.arguments",
        "pipeline.base.staging", "pipeline.base.stats", "pipeline.base.arrays",
        "pipeline.base.durations",
        "pipeline.cache.tiers",
        "pipeline.sizes.model_presets", "pipeline.sizes.units",
        "pipeline.charts", "pipeline.charts.provenance", "pipeline.measure.client",
        "pipeline.sizes.limits", "pipeline.sizes.grids",
        # packages whose __init__ is a docstring
        "pipeline.blocks", "pipeline.components", "pipeline.bench", "pipeline.trace",
        "pipeline.base", "pipeline.cache", "pipeline.sizes", "pipeline.ttft", "pipeline.commands",
        "pipeline.plan",
        "pipeline.measure", "pipeline.measure.llamacpp", "pipeline.workloads"),
    "workloads": (
        "pipeline.workloads.*", "pipeline.workloads.stream", "pipeline.workloads.stream_kernels",
        "pipeline.workloads.stream_limits", "pipeline.workloads.sources", "pipeline.measure.workload",
        "pipeline.measure.runner", "pipeline.measure.output",
        "pipeline.measure.llamacpp.gguf_model", "pipeline.ttft.summary",
        "pipeline.ttft.verdicts"),
    "models": (
        "pipeline.onepass.stack_distance", "pipeline.onepass.stack_distance_kernels",
        "pipeline.onepass.two_tier",
        "pipeline.cache.registry", "pipeline.policies", "pipeline.policies.*",
        "pipeline.components.block_lru_replay", "pipeline.onepass.lru_depths", "pipeline.catalog.model_api",
        "pipeline.onepass.bands",
        "pipeline.components.*", "pipeline.components.llamacpp_cache",
        "pipeline.measure.llamacpp.compare", "pipeline.measure.llamacpp.engine",
        "pipeline.ttft.model", "pipeline.ttft.latency", "pipeline.ttft.attribution",
        "pipeline.ttft.configs", "pipeline.ttft.measured_setup", "pipeline.plan.search",
        "pipeline.plan.blocks", "pipeline.plan.policies", "pipeline.catalog.model_options",
        "pipeline.ttft.scope",
        "pipeline.ttft.inputs",
        # the engine loop and its step-time models (their own branches)
        "pipeline.engine", "pipeline.engine.*", "pipeline.steptime", "pipeline.steptime.*",
        "pipeline.sizes.vllm_memory"),
    "stages": (
        "pipeline.simulate", "pipeline.sweeps", "pipeline.measured", "pipeline.report",
        "pipeline.charts.*", "pipeline.blocks.sweep", "pipeline.commands.run_blocks",
        "pipeline.commands.run_exports", "pipeline.blocks.engine_curves", "pipeline.blocks.policy_curves",
        "pipeline.trace.engine", "pipeline.commands.trace_outputs", "pipeline.plan.output",
        "pipeline.measure.llamacpp.local", "pipeline.measure.*", "pipeline.fleet",
        "pipeline.fleet.*", "pipeline.fit", "pipeline.fit.*", "pipeline.plan.fitted",
        "pipeline.charts.steptime", "pipeline.commands.simulate_time"),
    "commands": (
        "pipeline.cli", "pipeline.__main__", "pipeline.commands.run", "pipeline.commands.plan",
        "pipeline.commands.synth_ttft", "pipeline.commands.blocks", "pipeline.commands.trace",
        "pipeline.commands.policies", "pipeline.commands.measure", "pipeline.bench.*",
        "pipeline.bench.blocks", "pipeline.bench.engine_caches", "pipeline.commands.simulate",
        "pipeline.commands.fleet", "pipeline.commands.plan_fleet", "pipeline.commands.fit",
        "pipeline.commands.*",
        "pipeline.plan.load"),
}
ORDER = list(LAYERS)
#: the report's renderers: they draw frames and import no model
RENDERERS = ("pipeline.report", "pipeline.charts.*")
#: the one renderer that takes a model object: the plan command's page draws an Evaluator
RENDERER_MODEL_IMPORTS = {("pipeline.charts.plan", "pipeline.plan.search")}


def _matches(name: str, pattern: str) -> bool:
    return name == pattern or (pattern.endswith(".*") and name.startswith(pattern[:-1]))


def layer_of(name: str, layers: dict[str, tuple[str, ...]] = LAYERS) -> str | None:
    """The layer of module ``name``: an exact entry, else the longest matching pattern."""
    for layer, members in layers.items():
        if name in members:
            return layer
    best = None
    for layer, members in layers.items():
        for pattern in members:
            if pattern.endswith(".*") and _matches(name, pattern) and \
                    (best is None or len(pattern) > len(best[1])):
                best = (layer, pattern)
    return best[0] if best else None


def upward_imports(graph: dict[str, set[str]], layers: dict[str, tuple[str, ...]] = LAYERS
                   ) -> list[str]:
    """Every import of a module from a higher layer, as ``a (layer) -> b (layer)``."""
    order = list(layers)
    found = []
    for name, targets in sorted(graph.items()):
        low = layer_of(name, layers)
        for target in sorted(targets):
            high = layer_of(target, layers)
            if low and high and order.index(high) > order.index(low):
                found.append(f"{name} ({low}) -> {target} ({high})")
    return found


def test_upward_imports_are_found():
    layers = {"parts": ("p",), "models": ("m.*",), "commands": ("c",)}
    assert upward_imports({"p": {"m.x"}, "m.x": {"p"}, "c": {"m.x", "p"}}, layers) == \
        ["p (parts) -> m.x (models)"]
    assert layer_of("m.x.y", layers) == "models" and layer_of("q", layers) is None


@functools.cache
def _layer_graph() -> dict[str, set[str]]:
    """The import graph without ``__main__`` blocks (built once; the tests only read it)."""
    modules = pipeline_modules()
    return {name: imports_of(name, set(modules), skip_main=True) for name in modules}


def test_every_module_has_a_layer():
    unplaced = [name for name in pipeline_modules() if layer_of(name) is None]
    assert not unplaced, f"place these modules in tests/test_imports.py LAYERS: {unplaced}"


def test_imports_follow_the_layers():
    graph = _layer_graph()
    assert "pipeline.cache.registry" in graph["pipeline.catalog.model_api"]       # the walk works
    problems = upward_imports(graph)
    assert not problems, "imports from a higher layer:\n" + "\n".join(problems)


def test_the_report_imports_no_model():
    graph = _layer_graph()
    problems = [f"{name} -> {target}" for name, targets in sorted(graph.items())
                if any(_matches(name, pattern) for pattern in RENDERERS)
                for target in sorted(targets)
                if layer_of(target) == "models"
                and (name, target) not in RENDERER_MODEL_IMPORTS]
    assert not problems, "the report's renderers import models:\n" + "\n".join(problems)
