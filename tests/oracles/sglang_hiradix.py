"""SGLang's HiCache tree in plain Python: the test oracle is the production module
``pipeline.components.sglang_hiradix`` (with its parts ``sglang_hinode``,
``sglang_hieviction``, ``sglang_hitransfers``; one copy: ``--engine sglang
--enable-hierarchical-cache`` runs it), re-exported under the oracles' name."""

from pipeline.components.sglang_hiradix import WRITE_POLICIES, HiRadixTree  # noqa: F401
