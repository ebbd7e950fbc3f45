"""Every pipeline module imports in a fresh interpreter (``__main__`` aside: importing it runs
the CLI), and the import graph has no cycle.

The graph is read from the source (``ast``), counting every ``pipeline`` import wherever it
stands (a function-level import that dodges a cycle at run time is still a cycle).
"""

from __future__ import annotations

import ast
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


def imports_of(name: str, modules: set[str]) -> set[str]:
    """The pipeline modules that module ``name`` imports (anywhere in its source)."""
    spec = find_spec(name)
    tree = ast.parse(open(spec.origin, encoding="utf-8").read(), spec.origin)
    package = name if spec.submodule_search_locations else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {target for target in targets if target in modules}
    return found - {name}


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
    assert graph["pipeline.run"] >= {"pipeline.config", "pipeline.report"}   # the walk works
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
