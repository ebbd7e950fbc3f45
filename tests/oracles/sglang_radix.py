"""SGLang's radix cache in plain Python: the test oracle is the production module
``pipeline.components.sglang_radix`` (one copy; ``--engine sglang --enable-hierarchical-cache``
runs it), re-exported under the oracles' name."""

from pipeline.components.sglang_radix import (  # noqa: F401
    POLICIES, Node, RadixTree)
