"""Import an engine's own Python files on CPU without its dependencies: an import hook that
loads the package's modules from an extracted wheel, runs no package ``__init__`` and turns
every unavailable or compiled dependency (torch, pydantic, CUDA ops, ...) into an inert stub;
and the wheel's Python files, downloaded once with ``pip download --no-deps``.

Used by scripts/vllm_reference.py (vLLM's allocator), scripts/vllm_scheduler_reference.py
(its scheduler), scripts/lmcache_reference.py (LMCache's CPU backend) and the tests that run
them. Nothing of the engines is copied into this repository.
"""

from __future__ import annotations

import abc
import importlib.abc
import importlib.machinery
import importlib.util
import subprocess
import sys
import types
import zipfile
from pathlib import Path

__all__ = ["STUBBED", "Importer", "wheel_sources", "vllm_sources", "install_importer"]

#: vLLM modules replaced by stubs: model execution, platforms, configs (not needed here).
STUBBED = ("vllm.model_executor", "vllm.forward_context", "vllm.v1.attention",
           "vllm.distributed.parallel_state", "vllm.distributed.communication_op",
           "vllm.platforms", "vllm.sampling_params", "vllm.pooling_params", "vllm.config",
           "vllm.multimodal", "vllm.lora", "vllm.inputs", "vllm.tokenizers",
           "vllm.transformers_utils", "vllm.v1.worker", "vllm.v1.sample", "vllm.v1.spec_decode",
           "vllm.v1.structured_output", "vllm.compilation", "vllm.entrypoints",
           "vllm.v1.metrics.perf", "vllm.v1.metrics.loggers")


# --------------------------------------------------------------------------- inert stubs

class _Meta(abc.ABCMeta):
    """Stub classes: any attribute is another stub class; subscriptable, unionable."""

    def __new__(mcls, name, bases, namespace, **kwargs):
        return super().__new__(mcls, name, bases, namespace)

    def __init__(cls, name, bases, namespace, **kwargs):
        super().__init__(name, bases, namespace)

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _stub_class(f"{cls.__name__}.{name}")
        setattr(cls, name, value)
        return value

    def __getitem__(cls, key):
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__

    def __iter__(cls):
        return iter(())


class _Any(metaclass=_Meta):
    def __init_subclass__(cls, **kwargs):
        pass

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Any()

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Any()

    def __getitem__(self, key):
        return _Any()

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _stub_class(name: str) -> type:
    return _Meta(name, (_Any,), {})


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name == "__version__":
            return "2.9.0"
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _stub_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class Importer(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Packages of ``top`` load bare (no __init__), modules from source; ``stubbed`` modules,
    compiled ones and any module the package imports that is not installed become stubs."""

    def __init__(self, root: Path, top: str = "vllm", stubbed: tuple = STUBBED) -> None:
        self.root, self.top, self.stubbed = root, top, stubbed

    def _spec(self, fullname, locations):
        spec = importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        spec.submodule_search_locations = locations
        return spec

    def find_spec(self, fullname, path, target=None):
        if fullname == self.top or fullname.startswith(self.top + "."):
            if any(fullname == s or fullname.startswith(s + ".") for s in self.stubbed):
                return self._spec(fullname, [])
            location = self.root.joinpath(*fullname.split("."))
            if location.is_dir():
                return self._spec(fullname, [str(location)])
            source = location.with_suffix(".py")
            return importlib.util.spec_from_file_location(fullname, source) \
                if source.is_file() else self._spec(fullname, [])
        frame = sys._getframe(1)
        while frame is not None and ("importlib" in frame.f_code.co_filename
                                     or frame.f_code.co_filename == __file__
                                     or frame.f_code.co_filename.endswith("_reference.py")
                                     or frame.f_code.co_name == "find_spec"):
            frame = frame.f_back
        if frame is None or str(self.root) not in frame.f_code.co_filename:
            return None                                 # only vLLM's own imports are stubbed
        for finder in sys.meta_path:
            if isinstance(finder, Importer):
                continue
            try:
                if finder.find_spec(fullname, path, target) is not None:
                    return None
            except Exception:
                continue
        return self._spec(fullname, [])

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = spec.submodule_search_locations or []
        return module

    def exec_module(self, module):
        pass


def wheel_sources(package: str, version: str, cache: Path, marker: str) -> Path:
    """The Python files of ``package``'s ``version`` wheel under ``cache/package-version``,
    downloaded and extracted once (``marker``: a file that shows they are there)."""
    target = cache / f"{package}-{version}"
    if (target / marker).is_file():
        return target
    wheels = cache / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    f"{package}=={version}", "-d", str(wheels)], check=True, stdout=sys.stderr)
    wheel = next(wheels.glob(f"{package}-{version}-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target, [n for n in archive.namelist()
                                    if n.startswith(f"{package}/") and n.endswith(".py")])
    wheel.unlink()
    return target


def vllm_sources(version: str, cache: Path) -> Path:
    """The Python files of the vLLM ``version`` wheel, downloaded and extracted once."""
    return wheel_sources("vllm", version, cache, "vllm/v1/core/kv_cache_manager.py")


def install_importer(source: Path) -> None:
    """Import vLLM from ``source`` through ``Importer`` (once per process), with the two
    helpers of ``vllm/utils/__init__.py`` (not run: it imports torch) that the allocator and
    the Request need, set before any vLLM module binds them."""
    if not any(isinstance(f, Importer) for f in sys.meta_path):
        sys.meta_path.insert(0, Importer(source))
    import vllm.utils as vllm_utils
    vllm_utils.cdiv = lambda a, b: -(-a // b)
    vllm_utils.length_from_prompt_token_ids_or_embeds = lambda ids, embeds: len(ids)
