"""Measured TTFT (layer: stages; the parts of the ``measured`` stage and of ``run --measured``):
reading a measured file and its setup, attributing its requests to tiers, its statistics
and verdicts, the fitted TTFT model, its scope and predictions."""
