"""kvlab's pipeline: workload -> cache model -> per-access events -> aggregates -> report."""
