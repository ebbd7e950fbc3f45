"""llama.cpp through llama-cpp-python 0.3.36: the engine (``engine.py``), a tiny GGUF model
(``gguf_model.py``), predicted vs measured tiers (``compare.py``, with the prompt cache's
model ``pipeline.components.llamacpp_cache``) and the one-command measurement (``local.py``)."""
