"""SGLang's scheduler over HiCache in plain Python: the test oracle is the production module
``pipeline.components.sglang_hisched`` (one copy; ``--engine sglang --enable-hierarchical-cache``
runs it), re-exported under the oracles' name."""

from pipeline.components.sglang_hisched import (  # noqa: F401
    HiAdder, HiScheduler)
