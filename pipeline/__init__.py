"""kvlab's pipeline: workload -> cache model -> per-access events -> aggregates -> report."""

from pipeline.entry import guard_if_entry as _guard_if_entry

_guard_if_entry()      # python -m pipeline...: Ctrl-C is one line from here on (pipeline.entry)
