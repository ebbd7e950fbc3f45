"""SGLang's scheduler loop in plain Python: the test oracle is the production modules
``pipeline.components.sglang_sched`` and ``sglang_batch`` (one copy; ``--engine sglang
--enable-hierarchical-cache`` runs them), re-exported under the oracles' name."""

from pipeline.components.sglang_batch import Req  # noqa: F401
from pipeline.components.sglang_sched import Scheduler  # noqa: F401
