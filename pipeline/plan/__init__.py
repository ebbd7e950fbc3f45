"""The ``plan`` command: the smallest CPU tier that meets a TTFT or hit-ratio target."""
