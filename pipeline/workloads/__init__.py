"""Workloads: what is read, in which order. The lab's documents, benchmark patterns and trace
readers all produce the frames defined in ``pipeline.workloads.blocks``."""
