"""SGLang's scheduler loop in plain Python: the test oracle is the production module
``pipeline.components.sglang_sched`` (one copy; ``--engine sglang --enable-hierarchical-cache``
runs it), re-exported under the oracles' name."""

from pipeline.components.sglang_sched import (  # noqa: F401
    CLIP_MAX_NEW_TOKENS, CONTINUE, NO_TOKEN, OTHER, SCHEDULE_POLICIES, SGLANG_POLICIES, Adder,
    Batch, Req, Scheduler, SchedulerSettings, dfs_weight_order)
