"""A numpy-backed stand-in for the slice of ``torch`` that SGLang's scheduler, batch,
allocator and radix-tree files call on CPU: integer and bool tensors, their creation
(``tensor``, ``empty``, ``zeros``, ``full``, ``arange``, ``cat``...), indexing, arithmetic,
``.to(device | dtype, non_blocking=...)``, ``.tolist()``, ``.item()``, and the reductions the
naive paged allocator uses (``cumsum``, ``searchsorted``, ``where``, ``clamp``, ``unique``,
``sort``). Anything else is an inert stub (``stub_importer``), as torch was before.

``install()`` puts it in ``sys.modules["torch"]``: call it only in a process of its own
(scripts/sglang_scheduler_unmodified.py runs there), never in the test process.
"""

from __future__ import annotations

import sys
import types

import numpy as np

from stub_importer import _StubModule

int64 = long = np.dtype("int64")
int32 = int_ = np.dtype("int32")
uint64 = np.dtype("uint64")
int8, uint8 = np.dtype("int8"), np.dtype("uint8")
float32 = float_ = np.dtype("float32")
float16, bfloat16, float64 = np.dtype("float16"), np.dtype("float32"), np.dtype("float64")
bool = np.dtype("bool")  # noqa: A001  (torch.bool)
dtype = np.dtype
_DTYPES = (np.dtype,)


class device(str):
    """``torch.device("cpu")``: a string with ``.type``."""

    @property
    def type(self) -> str:
        return self.split(":")[0]


class _Size(int):
    """numpy's ``.size`` (an int) that is also torch's ``.size(dim=None)``."""

    def __new__(cls, n: int, shape: tuple):
        size = super().__new__(cls, n)
        size.shape = shape
        return size

    def __call__(self, dim=None):
        return self.shape if dim is None else self.shape[dim]


class Tensor(np.ndarray):
    """A numpy array with the tensor methods those files call."""

    device = device("cpu")
    is_cuda = False

    def to(self, *args, **kwargs) -> Tensor:
        target = kwargs.get("dtype")
        target = next((a for a in args if isinstance(a, _DTYPES)), target)
        return self.astype(target).view(Tensor) if target is not None else self

    def clone(self) -> Tensor:
        return self.copy()

    def numel(self) -> int:
        return int(np.ndarray.size.__get__(self))

    def cpu(self) -> Tensor:
        return self

    cuda = detach = contiguous = pin_memory = cpu

    def bool(self) -> Tensor:
        return self.astype(np.bool_)

    def long(self) -> Tensor:
        return self.astype(np.int64)

    def int(self) -> Tensor:
        return self.astype(np.int32)

    def clamp(self, min=None, max=None) -> Tensor:  # noqa: A002
        return np.clip(self, min, max).view(Tensor)

    def clamp_(self, min=None, max=None) -> Tensor:  # noqa: A002
        np.clip(self, min, max, out=self)
        return self

    def copy_(self, other, non_blocking=False) -> Tensor:
        self[...] = other
        return self

    def fill_(self, value) -> Tensor:
        self.fill(value)
        return self

    def unsqueeze(self, dim: int) -> Tensor:
        return np.expand_dims(self, dim).view(Tensor)

    def data_ptr(self) -> int:
        return self.ctypes.data

    @property
    def size(self) -> _Size:  # noqa: A003  (numpy's .size and torch's .size())
        return _Size(np.ndarray.size.__get__(self), self.shape)

    def dim(self) -> int:
        return self.ndim

    def __hash__(self) -> int:
        return id(self)


def _t(value, dtype=None) -> Tensor:
    return np.asarray(value, dtype=dtype).view(Tensor)


def tensor(data, dtype=None, device=None, pin_memory=False, **_):  # noqa: D103
    array = np.array(data, dtype=dtype)
    if dtype is None and (array.dtype == np.float64 or array.size == 0):
        array = array.astype(np.float32)
    return array.view(Tensor)


def _shape(shape):
    return tuple(shape[0]) if len(shape) == 1 and not np.isscalar(shape[0]) else shape


def empty(*shape, dtype=None, device=None, pin_memory=False, **_):  # noqa: D103
    return _t(np.zeros(_shape(shape), dtype=dtype or np.float32))


zeros = empty


def ones(*shape, dtype=None, device=None, **_):  # noqa: D103
    return _t(np.ones(_shape(shape), dtype=dtype or np.float32))


def full(shape, value, dtype=None, device=None, **_):  # noqa: D103
    return _t(np.full(shape, value, dtype=dtype))


def full_like(x, value, dtype=None, **_):  # noqa: D103
    return _t(np.full_like(x, value, dtype=dtype))


def zeros_like(x, dtype=None, **_):  # noqa: D103
    return _t(np.zeros_like(x, dtype=dtype))


def empty_like(x, dtype=None, **_):  # noqa: D103
    return _t(np.zeros_like(x, dtype=dtype))


def arange(start, end=None, step=1, dtype=None, device=None, **_):  # noqa: D103
    return _t(np.arange(start, end, step) if end is not None else np.arange(start),
              dtype or np.int64)


def cat(parts, dim=0):  # noqa: D103
    parts = [np.asarray(p) for p in parts]
    return _t(np.concatenate(parts, axis=dim)) if parts else _t([], np.int64)


concat = cat


def where(condition, x=None, y=None):  # noqa: D103
    return _t(np.where(condition, x, y)) if x is not None else tuple(
        _t(i) for i in np.nonzero(condition))


def cumsum(x, dim=0, dtype=None):  # noqa: D103
    return _t(np.cumsum(x, axis=dim, dtype=dtype))


def searchsorted(sorted_sequence, values, right=False, **_):  # noqa: D103
    return _t(np.searchsorted(sorted_sequence, values, side="right" if right else "left"))


def clamp(x, min=None, max=None):  # noqa: A002, D103
    return _t(np.clip(x, min, max))


def unique(x, **_):  # noqa: D103
    return _t(np.unique(np.asarray(x)))


def sort(x, dim=-1, descending=False, stable=False):  # noqa: D103
    order = np.argsort(np.asarray(x), kind="stable")
    if descending:
        order = order[::-1]
    return _t(np.asarray(x)[order]), _t(order)


def sum(x, dim=None, dtype=None):  # noqa: A001, D103
    return _t(np.sum(x, axis=dim, dtype=dtype))


def all(x):  # noqa: A001, D103
    return np.all(x)


def any(x):  # noqa: A001, D103
    return np.any(x)


def equal(a, b) -> bool:  # noqa: D103
    return np.array_equal(a, b)


def is_tensor(x) -> bool:  # noqa: D103
    return isinstance(x, Tensor)


def iinfo(dtype):  # noqa: D103
    return np.iinfo(dtype)


class _NoGrad:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, fn=None):
        return fn if fn is not None else self


no_grad = inference_mode = _NoGrad


def install() -> types.ModuleType:
    """Make this module ``torch`` (a package: submodules become inert stubs)."""
    module = _StubModule("torch")
    module.__path__ = []
    for name, value in list(globals().items()):
        if not name.startswith("_") and name not in ("install", "annotations", "sys",
                                                       "types", "np"):
            setattr(module, name, value)
    cuda = module.cuda = _StubModule("torch.cuda")
    cuda.is_available, cuda.device_count = (lambda: False), (lambda: 0)
    cuda.__path__ = []
    sys.modules["torch.cuda"] = cuda
    sys.modules["torch"] = module
    return module
