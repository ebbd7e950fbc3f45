"""Measured and synthetic TTFT: reading a measured file and its setup, attributing its requests
to tiers, its statistics and verdicts, the fitted TTFT model, its scope and predictions."""
