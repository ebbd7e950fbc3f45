"""llama.cpp through llama-cpp-python 0.3.36: the engine (``engine.py``), a tiny GGUF model
(``gguf_model.py``), its two-tier prompt cache as a model (``cache_model.py``), predicted vs
measured tiers (``compare.py``) and the one-command measurement (``local.py``)."""
