"""SGLang's HiCache tree in plain Python: the test oracle is the production module
``pipeline.components.sglang_hiradix`` (one copy; ``--engine sglang --enable-hierarchical-cache``
runs it), re-exported under the oracles' name."""

from pipeline.components.sglang_hiradix import (  # noqa: F401
    LOAD_BACK_THRESHOLD, WRITE_POLICIES, HiNode, HiRadixTree)
