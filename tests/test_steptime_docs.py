"""The step-time modules' docstring examples run as shown (docs/latency.md's commands run in
tests/test_docs_commands.py with every other page's)."""

import doctest

from pipeline.steptime import cost, fitted, metrics, roofline
from pipeline.sizes import gpus


def test_module_docstrings():
    for module in (fitted, gpus, metrics, roofline, cost):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
