"""A model of vLLM v1's engine loop: scheduler, KV cache manager, optional CPU tier.

``config.SchedulerConfig`` -> ``core.EngineSim`` (one ``step()`` per executed batch) ->
``loop.simulate`` (requests arriving by step or by time, per-request and per-step frames).
``engines.ENGINES`` is the engine registry (``vllm``: ``vllm.VLLM``, this package's loop)
that ``simulate``, ``fleet`` and ``plan --fleet`` read (``--engine``).
"""
