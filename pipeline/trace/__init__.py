"""Trace replay (layer: stages): ``engine`` runs a trace or a pattern (read by
``pipeline.workloads.sources``) through the block models; ``pipeline.commands.trace`` is the
command and ``pipeline.commands.trace_outputs`` writes its files."""
