"""Measuring a real engine (layer: stages): ``python -m pipeline measure``
(``pipeline.commands.measure``).

``workload.py`` (the lab's documents as prompts), ``client.py`` (one timed streaming
completion over httpx), ``runner.py`` (send, append a JSON line per request, resume),
``output.py`` / ``sidecar.py`` (the files it writes), ``replay.py`` / ``traffic.py`` (a
trace replayed against a server) and ``llamacpp/`` (a local llama.cpp server and its tiny
model; its prompt cache's model is ``pipeline.components.llamacpp_cache``).
"""
