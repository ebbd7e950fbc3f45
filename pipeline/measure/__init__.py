"""Measuring a real engine: ``python -m pipeline measure`` (cli.py).

``workload.py`` (the lab's documents as prompts), ``client.py`` (one timed streaming
completion over httpx), ``runner.py`` (send, append a JSON line per request, resume), and
``llamacpp/`` (a local llama.cpp server, its tiny model, and its prompt-cache model).
"""
