"""Block mode's stage (layer: stages): the block sweeps of ``run --block-size`` and the
report (``sweep``), and the report's curves of the engine models (``engine_curves``) and of
the policy family (``policy_curves``). The block stream is ``pipeline.workloads.stream``,
the models are the registry's (``pipeline.catalog``)."""
