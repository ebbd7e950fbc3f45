"""Fitting an engine's step costs to measured requests (layer: stages): ``python -m pipeline
fit`` (``pipeline.commands.fit``).

``inputs.py`` (measured replay files and their sidecars), ``schedule.py`` (the simulated
schedule of the measured requests), ``solve.py`` (least squares on that schedule, standard
errors, what the data cannot identify), ``evaluate.py`` (residuals, held-out error) and
``fitted.py`` (the fitted JSON that ``--latency FILE`` reads). ``fit --vllm-bench``:
``vllm_bench.py`` (vllm bench serve results as runs), ``roofline_form.py`` (the roofline as a
form ``solve`` fits: its efficiency factors) and ``roofline_fit.py`` (the fit and the
``roofline-efficiency`` JSON). ``fit --vllm-metrics``: ``prometheus_text.py`` (the text
exposition format), ``vllm_metrics.py`` (vLLM's histograms and counters, one scrape or the
difference of two) and ``metrics_fit.py`` (the factors from two means on steps rebuilt from
the histograms).
"""
