"""Shared test helpers: paths, a deliberately simple list-based reference cache, and what keeps
the suite fast (byte code kept, the engines compiled once before the workers start, the slow
few-test files handed out first)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KVLAB = ROOT / "kvlab"
#: The shared data folder beside the repository (``../shared``; KVLAB_SHARED names another).
#: A fresh clone has none: every test that reads it skips and says why (``needs_shared_trace``,
#: ``shared_trace()``).
SHARED = Path(os.environ.get("KVLAB_SHARED", ROOT.parent / "shared"))
SHARED_TRACES = SHARED / "traces"
SYNTHETIC_TRACE = SHARED_TRACES / "synthetic_trace.jsonl"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# With PYTHONDONTWRITEBYTECODE set (as in many container images) each xdist worker and each
# `python -m pipeline` subprocess compiled every module, and pytest rewrote every test module,
# from source on every run: seconds of CPU per process. The tests keep the byte code in the
# (git-ignored) __pycache__ folders, where numba's cache=True kernels already are.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    sys.dont_write_bytecode = False

# Keep hypothesis quick and deterministic on CI's 2 cores (80 examples per property;
# KVLAB_EXAMPLES=1000 for a deeper search).
from hypothesis import settings  # noqa: E402

settings.register_profile("kvlab", max_examples=int(os.environ.get("KVLAB_EXAMPLES", "80")),
                          deadline=None, derandomize=True)
settings.load_profile("kvlab")

_ABSENT = (f"the shared Mooncake trace {SYNTHETIC_TRACE} is absent (../shared/ beside the "
           f"repository; KVLAB_SHARED names another folder)")
#: Marks a test that reads the shared Mooncake trace: skipped, with the reason, without it.
needs_shared_trace = pytest.mark.skipif(not SYNTHETIC_TRACE.exists(), reason=_ABSENT)


def needs_sglang_sources(msgspec: bool = True) -> list:
    """The marks of a module that drives SGLang's own code (``pytestmark``): skipped, with the
    reason, without its sources in the cache folder (or msgspec, which its unified tree core
    imports)."""
    import importlib.util
    sys.path.insert(0, str(ROOT / "scripts"))
    import sglang_reference as ref
    marks = [pytest.mark.skipif(not ref.sources_present(), reason=(
        f"SGLang {ref.VERSION} sources absent from {ref.SOURCES}: "
        "run scripts/ensure_sglang_sources.sh"))]
    if msgspec:
        marks.append(pytest.mark.skipif(importlib.util.find_spec("msgspec") is None,
                                        reason="SGLang's unified tree core imports msgspec"))
    return marks


@pytest.fixture(scope="module")
def sglang():
    """One spawned process per test module for SGLang's own code (its modules, patched by
    the reference scripts' stubs, stay out of the test process)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


def shared_trace() -> Path:
    """The shared Mooncake trace's path; skips the calling test (saying why) when absent."""
    if not SYNTHETIC_TRACE.exists():
        pytest.skip(_ABSENT)
    return SYNTHETIC_TRACE


class ModelLRU:
    """Reference LRU: a plain list, most recent last, written for clarity not speed."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.entries = []  # [key, size], oldest first

    def used(self):
        return sum(size for _, size in self.entries)

    def has(self, key):
        return any(k == key for k, _ in self.entries)

    def access(self, key, size):
        for index, (k, stored) in enumerate(self.entries):
            if k == key:
                self.entries.append(self.entries.pop(index))
                return True
        if size <= self.capacity:       # the only rejection: larger than the capacity
            while self.used() + size > self.capacity:
                self.entries.pop(0)
            self.entries.append([key, size])
        return False


class ModelTwoTier:
    """Reference two-tier cache: the lab's three rules, spelled out."""

    def __init__(self, gpu_capacity, cpu_capacity):
        self.gpu = ModelLRU(gpu_capacity)
        self.cpu = ModelLRU(cpu_capacity)

    def access(self, key, size):
        if self.gpu.has(key):
            self.gpu.access(key, size)
            return "gpu"
        if self.cpu.has(key):
            self.cpu.access(key, size)
            self.gpu.access(key, size)
            return "cpu"
        self.gpu.access(key, size)
        self.cpu.access(key, size)
        return "miss"


def run_outputs(root):
    """``python -m pipeline run`` options that send every output under ``root``."""
    return ["--events-dir", str(root / "events"), "--exports-dir", str(root / "exports"),
            "--report", str(root / "report" / "index.html")]


def folder_snapshot(root):
    """Every file under ``root`` with its bytes, and every folder (None)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def cli_in_process(*argv):
    """``python -m pipeline ARGV`` in this process: CompletedProcess(argv, status, stdout,
    stderr) (the parser's exit on bad input is caught)."""
    import contextlib
    import io
    import subprocess

    from pipeline.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(argv), prog="python -m pipeline")
        except SystemExit as exc:
            status = exc.code
    return subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue())


def refused(argv, message: str, out) -> None:
    """``python -m pipeline ARGV`` (``cli_in_process``) exits 2 with ``message`` in its last
    line of stderr and writes nothing at ``out``."""
    proc = cli_in_process(*argv)
    assert proc.returncode == 2
    assert message in proc.stderr.strip().splitlines()[-1]
    assert not out.exists()


#: Test files with a few tests that take seconds each (a real llama.cpp server, a Ray cluster,
#: engine-model runs with their reports). xdist's loadfile hands out the files with the most
#: tests first, so these came last and ran alone at the end on one core;
#: pytest_xdist_make_scheduler starts them first (tests/test_suite_setup.py: they exist).
START_FIRST = ("tests/test_llamacpp_engine.py", "tests/test_fleet_ray.py",
               "tests/test_report_off_lab.py")


#: Commands (docs/simulate.md's) whose first run compiles the two engines' kernels, the
#: largest (the vLLM engine's ~35 s of CPU, SGLang's ~20 s).
WARM_UP = (("simulate", "data/simulate/chat.jsonl", "--format", "tokens", "--block-size", "4",
            "--gpu", "256"),
           ("simulate", "data/simulate/chat.jsonl", "--format", "tokens", "--block-size", "4",
            "--gpu", "256", "--engine", "sglang"))


def pytest_configure(config):
    """A whole run on a clean numba cache, before xdist starts its workers: the WARM_UP
    commands side by side, so the engines' kernels compile once, on both cores, and every
    worker (and every command a test starts) loads them. Without it both workers, or a
    worker and the docs test's commands, compiled the engine at the same time (~20 s of
    CPU twice)."""
    whole = config.args_source == pytest.Config.ArgsSource.TESTPATHS   # not chosen files
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None) \
            or not whole or _engine_cached():
        return
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as out:
        runs = [subprocess.Popen([sys.executable, "-m", "pipeline", *argv, "--out",
                                  f"{out}/{i}"], cwd=ROOT, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL) for i, argv in enumerate(WARM_UP)]
        for run in runs:                        # a failure is the tests' to report
            run.wait()


def _engine_cached() -> bool:
    """numba's index of the vLLM engine's kernel exists (``__pycache__`` or NUMBA_CACHE_DIR)."""
    cache = os.environ.get("NUMBA_CACHE_DIR")
    where = Path(cache) if cache else ROOT / "pipeline" / "engine" / "__pycache__"
    return where.is_dir() and any(where.rglob("krun._engine-*.nbi"))


@pytest.hookimpl(optionalhook=True)         # an xdist hook: fine when xdist is not loaded
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` (pyproject's addopts), with the START_FIRST files handed out first."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class StartFirst(LoadFileScheduling):
        def _assign_work_unit(self, node):
            for scope in reversed(START_FIRST):
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return StartFirst(config, log)


# The literal LMCache port runs through every command as ``lmcache-replay`` (a test oracle,
# no production model).
from oracles.lmcache_cpu import ENTRY as LMCACHE_ORACLE  # noqa: E402
from pipeline import catalog as _registry  # noqa: E402

_registry.register(LMCACHE_ORACLE)
