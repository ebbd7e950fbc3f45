"""The ``plan`` command's stage (layer: stages): the evaluators and the search for the smallest
tier (``search``, ``blocks``, ``policies``), ``fitted`` (``--latency FITTED``), ``load``
(``--target-ttft-p90-ms`` on the engine model) and ``output``; the command is
``pipeline.commands.plan``."""
