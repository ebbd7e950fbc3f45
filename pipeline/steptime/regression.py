"""The least squares of the time package's fits, columns scaled to unit norm first: the
lab's per-tier TTFT regressions (``pipeline.ttft.model``) and ``fit``'s step-time
coefficients (``pipeline.fit.solve``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["null_space", "identifiable", "scaled_least_squares"]


def null_space(x: np.ndarray, rtol: float = 1e-9) -> tuple[np.ndarray, int, np.ndarray]:
    """(column norms, rank, null-space rows) of ``x`` with its columns scaled to unit norm."""
    norms = np.linalg.norm(x, axis=0)
    scaled = x / np.where(norms > 0, norms, 1.0)
    _, singular, vt = np.linalg.svd(scaled, full_matrices=True)
    rank = int(np.sum(singular > rtol * max(singular.max(initial=0.0), 1.0)))
    return norms, rank, vt[rank:]


def identifiable(x: np.ndarray, rtol: float = 1e-9) -> tuple[np.ndarray, int]:
    """(identifiable per column, rank): column j is identifiable iff no null-space vector of
    ``x`` has a component on it (columns are scaled to unit norm first)."""
    norms, rank, null = null_space(x, rtol)
    return np.all(np.abs(null) < 1e-6, axis=0) & (norms > 0), rank


def scaled_least_squares(a: np.ndarray, b: np.ndarray,
                         inverse: Callable[[np.ndarray], np.ndarray] = np.linalg.inv
                         ) -> tuple[np.ndarray, np.ndarray | None]:
    """The solution of ``a x = b`` and its standard errors (None with no more rows than
    columns); ``inverse`` inverts the scaled normal matrix (``np.linalg.pinv`` where it may
    be singular)."""
    n, p = a.shape
    norms = np.linalg.norm(a, axis=0)
    solution, *_ = np.linalg.lstsq(a / norms, b, rcond=None)
    solution = solution / norms
    if n <= p:
        return solution, None
    residual = b - a @ solution
    sigma2 = float(residual @ residual) / (n - p)
    cov = sigma2 * inverse((a / norms).T @ (a / norms)) / np.outer(norms, norms)
    return solution, np.sqrt(np.clip(np.diag(cov), 0, None))
