"""``--model-config PATH``: a ``ModelShape`` from a Hugging Face ``config.json``.

Read as transformers' config classes define the fields (``LlamaConfig``, ``Qwen2Config``,
``MistralConfig``, ``MixtralConfig``, ``Qwen2MoeConfig``, ``Qwen3MoeConfig``): the sizes
``num_hidden_layers``, ``hidden_size``, ``intermediate_size``, ``num_attention_heads``,
``vocab_size`` are required; ``num_key_value_heads`` absent is multi-head attention (as
those classes default it to ``num_attention_heads``); ``head_dim`` absent is hidden /
heads; ``tie_word_embeddings`` absent is False (those classes' default). A multimodal
config's ``text_config`` is read when the top level has no ``num_hidden_layers``.

Mixture of experts: ``num_local_experts`` (Mixtral) or ``num_experts`` (Qwen MoE) experts,
``num_experts_per_tok`` of them per token, each of ``moe_intermediate_size`` (Mixtral's
experts are ``intermediate_size``), a shared expert of ``shared_expert_intermediate_size``
(Qwen2-MoE) where given. Layers that mix dense and sparse MLPs (``mlp_only_layers``,
``decoder_sparse_step`` > 1, ``first_k_dense_replace``) and MLA (``kv_lora_rank``) are
refused by name: their sizes are not one layer's times the layers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.sizes.model_presets import ModelShape

__all__ = ["read_model_config", "model_config_shape"]

REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")


def _integer(config: dict, name: str, where: str, default: Any = None) -> int:
    value = config.get(name, default)
    if value is None:
        raise ValueError(f"{where}: lacks {name}")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: {name} must be a whole number >= 0, got {value!r}")
    return value


def model_config_shape(config: Any, where: str) -> ModelShape:
    """The ``ModelShape`` of a parsed config.json; ValueError ``where: ...`` naming the
    field."""
    if not isinstance(config, dict):
        raise ValueError(f"{where}: not a config.json object")
    if "num_hidden_layers" not in config and isinstance(config.get("text_config"), dict):
        config = config["text_config"]
    for name in ("kv_lora_rank", "mlp_only_layers", "first_k_dense_replace"):
        if config.get(name):
            raise ValueError(f"{where}: {name} is not supported (MLA or layers of mixed MLPs: "
                             f"no one layer's sizes)")
    if (config.get("decoder_sparse_step") or 1) > 1:
        raise ValueError(f"{where}: decoder_sparse_step > 1 is not supported (layers of "
                         f"mixed MLPs)")
    sizes = {name: _integer(config, name, where) for name in REQUIRED}
    heads = sizes["num_attention_heads"]
    experts = _integer(config, "num_local_experts", where, config.get("num_experts") or 0)
    moe: dict[str, int] = {}
    if experts:
        moe = {"experts": experts,
               "experts_per_token": _integer(config, "num_experts_per_tok", where),
               "moe_intermediate_size": _integer(config, "moe_intermediate_size", where,
                                                 config.get("intermediate_size")),
               "shared_intermediate_size": _integer(
                   config, "shared_expert_intermediate_size", where, 0)}
    intermediate = _integer(config, "intermediate_size", where,
                            moe.get("moe_intermediate_size"))
    tied = config.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise ValueError(f"{where}: tie_word_embeddings must be true or false, got {tied!r}")
    file = Path(where)
    name = config.get("_name_or_path") or (file.stem if file.stem != "config"
                                           else file.parent.name or file.stem)
    try:
        return ModelShape(str(name), sizes["num_hidden_layers"], sizes["hidden_size"],
                          intermediate, heads,
                          _integer(config, "num_key_value_heads", where, heads),
                          sizes["vocab_size"], tied, where,
                          _integer(config, "head_dim", where, 0) or None, **moe)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def read_model_config(path: str | Path) -> ModelShape:
    """The ``ModelShape`` of the config.json at ``path``; ValueError naming the file (and
    the field, or the line of a JSON error)."""
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        line = f":{exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise ValueError(f"{path}{line}: not a JSON config") from None
    return model_config_shape(config, str(path))
