"""Trace replay: ``python -m pipeline trace``.

``inputs`` reads a trace or generates a pattern, ``engine`` runs it through the block model
(``pipeline.blocks``), ``outputs`` writes Parquet, the JSON summary and reports/trace.html,
``command`` is the CLI.
"""
