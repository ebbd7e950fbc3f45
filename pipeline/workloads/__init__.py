"""Workloads (layer: workloads): what is read, in which order. The lab's documents, benchmark
patterns and trace readers all produce one ``Workload`` (``workload``; frames in ``blocks``);
``sources`` reads the workload options every engine command shares; ``stream`` is the block
stream every block model reads (``stream_limits``: its checks)."""
