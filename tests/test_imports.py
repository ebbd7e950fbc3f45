"""Every pipeline module imports in a fresh interpreter (``__main__`` aside: importing it runs
the CLI), the import graph has no cycle, and it follows the layers.

The graph is read from the source (``ast``), counting every ``pipeline`` import wherever it
stands (a function-level import that dodges a cycle at run time is still a cycle, and a
command's ``if __name__ == "__main__":`` block counts too).

The layers, lowest first (``LAYERS``): core (base, sizes, the cache interface) -> workloads ->
engine components (components, policies) -> engine loop / one-pass (engine, onepass, the
catalog of entries) -> time (steptime) -> stages (``simulate.py``, ``sweeps.py``,
``measured.py`` and the stages' packages) -> charts (``report.py``, charts) -> commands. A
module imports only modules of its own layer or below, with no exception; each package
belongs to exactly one layer, and the report and its charts import no model layer, so the
page is a function of the frames it is given. A new package must be added here.
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

#: layer -> its members, lowest first: a package (the package and every module under it) or
#: one of the top-level modules (the package ``pipeline``, ``entry``, the CLI and the four
#: stage entry points). Each package belongs to exactly one layer; there is no exception.
LAYERS: dict[str, tuple[str, ...]] = {
    "core": ("pipeline", "pipeline.entry", "pipeline.base", "pipeline.sizes", "pipeline.cache"),
    "workloads": ("pipeline.workloads",),
    "components": ("pipeline.components", "pipeline.policies"),
    "engine": ("pipeline.engine", "pipeline.onepass", "pipeline.catalog"),
    "time": ("pipeline.steptime",),
    "stages": ("pipeline.sweeps", "pipeline.measured", "pipeline.blocks",
               "pipeline.trace", "pipeline.plan", "pipeline.fleet", "pipeline.measure",
               "pipeline.ttft", "pipeline.fit"),
    "charts": ("pipeline.report", "pipeline.charts"),
    # simulate.py is the simulate stage's entry point and its command (it draws the report)
    "commands": ("pipeline.cli", "pipeline.__main__", "pipeline.simulate", "pipeline.commands",
                 "pipeline.bench"),
}
ORDER = list(LAYERS)
#: the layers of models: the report and its charts import none (they draw the frames given)
MODEL_LAYERS = ("components", "engine")
#: the modules at pipeline/'s top level (not packages): each is named in LAYERS itself
TOP_LEVEL = ("pipeline.entry", "pipeline.cli", "pipeline.__main__", "pipeline.simulate",
             "pipeline.sweeps", "pipeline.measured", "pipeline.report")


def layer_of(name: str, layers: dict[str, tuple[str, ...]] = LAYERS) -> str | None:
    """The layer of module ``name``: the layer naming it, or naming the package it is in
    (``pipeline`` itself names only the package, not its modules)."""
    for layer, members in layers.items():
        if name in members:
            return layer
    for layer, members in layers.items():
        if any(member != "pipeline" and name.startswith(member + ".") for member in members):
            return layer
    return None


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
    layers = {"parts": ("p",), "models": ("m",), "commands": ("c",)}
    assert upward_imports({"p": {"m.x"}, "m.x": {"p"}, "c": {"m.x", "p"}}, layers) == \
        ["p (parts) -> m.x (models)"]
    assert layer_of("m.x.y", layers) == "models" and layer_of("q", layers) is None


@functools.cache
def _layer_graph() -> dict[str, set[str]]:
    """The import graph, ``__main__`` blocks included (built once; the tests only read it)."""
    modules = pipeline_modules()
    return {name: imports_of(name, set(modules)) for name in modules}


def test_every_module_has_a_layer():
    unplaced = [name for name in pipeline_modules() if layer_of(name) is None]
    assert not unplaced, f"place these modules in tests/test_imports.py LAYERS: {unplaced}"


def test_each_package_is_in_one_layer_and_the_top_level_holds_only_named_modules():
    """A layer names whole packages (never one module of a package), each once; a module at
    pipeline/'s top level is one of ``TOP_LEVEL``, each named in a layer."""
    members = [member for group in LAYERS.values() for member in group]
    assert len(members) == len(set(members))
    packages = {name for name in pipeline_modules() if name != "pipeline"
                and find_spec(name).submodule_search_locations}
    top_packages = {name for name in packages if name.count(".") == 1}
    assert {m for m in members if m not in TOP_LEVEL and m != "pipeline"} == top_packages
    top_modules = {name for name in pipeline_modules()
                   if name.count(".") == 1 and name not in packages}
    assert top_modules == set(TOP_LEVEL)


def test_imports_follow_the_layers():
    graph = _layer_graph()
    assert "pipeline.cache.registry" in graph["pipeline.catalog"]       # the walk works
    assert "pipeline.cli" in graph["pipeline.commands.plan"]            # __main__ blocks too
    problems = upward_imports(graph)
    assert not problems, "imports from a higher layer:\n" + "\n".join(problems)


def test_the_report_imports_no_model():
    """The report and its charts draw the frames they are given: no model layer imported."""
    graph = _layer_graph()
    problems = [f"{name} -> {target}" for name, targets in sorted(graph.items())
                if layer_of(name) == "charts"
                for target in sorted(targets) if layer_of(target) in MODEL_LAYERS]
    assert not problems, "the report's renderers import models:\n" + "\n".join(problems)
