"""Model presets: a model's KV footprint (bytes per token) and, for dense models, its shape.

Two KV formulas (one per attention kind):

* **standard** (MHA/GQA): ``2 (K and V) x layers x KV heads x head dim x dtype bytes``.
* **MLA** (DeepSeek-V2/V3): one latent vector per token and layer, no separate K and V:
  ``(kv_lora_rank + qk_rope_head_dim) x layers x dtype bytes``. vLLM sizes MLA pages this way
  (``vllm/v1/kv_cache_interface.py``, ``MLAAttentionSpec``: a single latent per token,
  ``head_size_v = 0``).

A dense ``ModelShape`` (config.json's sizes) also gives FLOPs and weight bytes per token for
the roofline step-time model (``pipeline.steptime``).

>>> preset("llama-3.1-8b").bytes_per_token
131072
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DTYPE_BYTES", "KVSize", "PRESETS", "MODELS", "ModelShape", "model_shape",
           "parse_model_shape", "preset", "shape", "mla_shape", "parse_shape",
           "DEFAULT_PRESET"]

DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2,
               "half": 2, "fp8": 1, "int8": 1}
DEFAULT_PRESET = "qwen2.5-1.5b"       # the lab's model


@dataclass(frozen=True)
class KVSize:
    """A model's KV cache footprint: bytes per token, how it was derived, and a name."""

    name: str
    bytes_per_token: int
    formula: str
    source: str = ""

    def __post_init__(self) -> None:
        if self.bytes_per_token < 1:
            raise ValueError(f"bytes per token must be >= 1, got {self.bytes_per_token}")

    def bytes(self, tokens: int) -> int:
        """Bytes of ``tokens`` tokens of KV cache."""
        return tokens * self.bytes_per_token

    def tokens(self, size_bytes: int) -> int:
        """Whole tokens that fit in ``size_bytes`` bytes."""
        return size_bytes // self.bytes_per_token

    def describe(self) -> str:
        """One line: name, bytes per token and the formula that gave them."""
        return f"{self.name}: {self.bytes_per_token:,} bytes per token ({self.formula})"


def _named(table: dict, name: str, what: str, known) -> object:
    """``table[name.lower()]``; ValueError naming ``known`` if it is not there."""
    try:
        return table[name.lower()]
    except KeyError:
        raise ValueError(f"unknown {what} {name!r}: expected one of {', '.join(known)}") \
            from None


def _dtype_bytes(dtype: str) -> int:
    return _named(DTYPE_BYTES, dtype, "dtype", sorted(DTYPE_BYTES))


def shape(name: str, layers: int, kv_heads: int, head_dim: int, dtype: str = "bf16",
          source: str = "") -> KVSize:
    """Standard attention (MHA/GQA): 2 x layers x KV heads x head dim x dtype bytes."""
    size = _dtype_bytes(dtype)
    if min(layers, kv_heads, head_dim) < 1:
        raise ValueError(f"layers, KV heads and head dim must be >= 1, got "
                         f"{layers}, {kv_heads}, {head_dim}")
    return KVSize(name, 2 * layers * kv_heads * head_dim * size,
                  f"standard: 2 x {layers} layers x {kv_heads} KV heads x {head_dim} head dim "
                  f"x {size} bytes ({dtype})", source)


def mla_shape(name: str, layers: int, kv_lora_rank: int, qk_rope_head_dim: int,
              dtype: str = "bf16", source: str = "") -> KVSize:
    """MLA: (kv_lora_rank + qk_rope_head_dim) x layers x dtype bytes (one latent, no K/V pair)."""
    size = _dtype_bytes(dtype)
    return KVSize(name, (kv_lora_rank + qk_rope_head_dim) * layers * size,
                  f"MLA: ({kv_lora_rank} kv_lora_rank + {qk_rope_head_dim} qk_rope_head_dim) "
                  f"x {layers} layers x {size} bytes ({dtype})", source)


@dataclass(frozen=True)
class ModelShape:
    """A decoder's shape as its config.json gives it (``num_hidden_layers``, ``hidden_size``,
    ``intermediate_size``, ``num_attention_heads``, ``num_key_value_heads``, ``vocab_size``,
    ``tie_word_embeddings``, ``head_dim`` when given): what FLOPs and weight bytes per token
    follow from. Linear layers only (q, k, v, o and a SwiGLU MLP of gate, up and down); norms
    and biases are under 0.1 % of the weights and left out.

    A mixture of experts (``experts`` > 0) replaces the MLP by ``experts`` SwiGLU experts of
    ``moe_intermediate_size`` (each token through ``experts_per_token`` of them), a router
    (hidden x experts) and, where the format has one, a shared expert of
    ``shared_intermediate_size``: ``layer_parameters`` counts every expert (the weights held),
    ``active_layer_parameters`` the ones a token goes through (its FLOPs)."""

    name: str
    layers: int
    hidden_size: int
    intermediate_size: int
    attention_heads: int
    kv_heads: int
    vocab_size: int
    tie_word_embeddings: bool = False
    source: str = ""
    head_dim_size: int | None = None
    experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_intermediate_size: int = 0

    def __post_init__(self) -> None:
        sizes = (self.layers, self.hidden_size, self.intermediate_size, self.attention_heads,
                 self.kv_heads, self.vocab_size)
        if min(sizes) < 1:
            raise ValueError(f"every size of a model shape must be >= 1, got {sizes}")
        if self.head_dim_size is None and self.hidden_size % self.attention_heads:
            raise ValueError(f"hidden size {self.hidden_size} must divide into "
                             f"{self.attention_heads} heads (or give head_dim)")
        if self.attention_heads % self.kv_heads:
            raise ValueError(f"{self.attention_heads} attention heads must divide into "
                             f"{self.kv_heads} KV heads")
        if self.experts and not 0 < self.experts_per_token <= self.experts:
            raise ValueError(f"experts per token must be 1..{self.experts}, got "
                             f"{self.experts_per_token}")

    @property
    def head_dim(self) -> int:
        """config.json's ``head_dim``, else hidden size / attention heads."""
        return self.head_dim_size or self.hidden_size // self.attention_heads

    def _layer(self, experts: int) -> int:
        """One layer's weights with ``experts`` experts' MLPs (a dense MLP without experts):
        q and o (hidden x heads x head dim), k and v (hidden x KV heads x head dim), the MLP."""
        attention = (2 * self.hidden_size * self.attention_heads * self.head_dim
                     + 2 * self.hidden_size * self.kv_heads * self.head_dim)
        if not self.experts:
            return attention + 3 * self.hidden_size * self.intermediate_size
        return (attention + 3 * self.hidden_size * (experts * self.moe_intermediate_size
                                                    + self.shared_intermediate_size)
                + self.hidden_size * self.experts)

    @property
    def layer_parameters(self) -> int:
        """Weights of the decoder layers, every expert's included (what memory holds)."""
        return self.layers * self._layer(self.experts)

    @property
    def active_layer_parameters(self) -> int:
        """Weights of the decoder layers one token goes through (its experts only): the FLOPs
        per token are twice this."""
        return self.layers * self._layer(self.experts_per_token)

    @property
    def lm_head_parameters(self) -> int:
        """vocab x hidden (the output projection, the embedding table when tied)."""
        return self.vocab_size * self.hidden_size

    @property
    def parameters(self) -> int:
        """All weights: layers, embedding table and (when untied) a separate LM head."""
        tables = 1 if self.tie_word_embeddings else 2
        return self.layer_parameters + tables * self.lm_head_parameters

    def kv_heads_per_gpu(self, tensor_parallel: int = 1) -> int:
        """KV heads one GPU holds under tensor parallelism: vLLM's ``max(1, KV heads //
        tp)`` (``vllm/config/model.py:1683``, replicated below one head per GPU); ValueError
        unless tp divides the attention heads (``vllm/config/model.py:1559``) and the KV
        heads divide by tp or tp by them (``QKVParallelLinear``,
        ``vllm/model_executor/layers/linear.py:1068-1070``)."""
        tp = tensor_parallel
        if self.attention_heads % tp:
            raise ValueError(f"{tp} does not divide the {self.attention_heads} attention "
                             f"heads of {self.name}")
        if self.kv_heads % tp and tp % self.kv_heads:
            raise ValueError(f"{tp} and the {self.kv_heads} KV heads of {self.name} do not "
                             f"divide one another")
        return max(1, self.kv_heads // tp)

    def kv(self, dtype: str = "bf16", tensor_parallel: int = 1) -> KVSize:
        """The KV footprint (standard formula) of this shape, per GPU under tensor
        parallelism (``kv_heads_per_gpu``)."""
        size = shape(self.name, self.layers, self.kv_heads_per_gpu(tensor_parallel),
                     self.head_dim, dtype, self.source)
        if tensor_parallel == 1:
            return size
        return KVSize(size.name, size.bytes_per_token,
                      f"{size.formula}, per GPU of tensor parallel {tensor_parallel}",
                      size.source)


def _hf(repo: str) -> str:
    return f"https://huggingface.co/{repo}/blob/main/config.json"


#: Published dense shapes (config.json of each repository: num_hidden_layers, hidden_size,
#: intermediate_size, num_attention_heads, num_key_value_heads, vocab_size,
#: tie_word_embeddings; head dim = hidden_size / num_attention_heads).
MODELS: dict[str, ModelShape] = {m.name.lower(): m for m in (
    ModelShape("Qwen2.5-0.5B", 24, 896, 4864, 14, 2, 151936, True, _hf("Qwen/Qwen2.5-0.5B")),
    ModelShape("Qwen2.5-1.5B", 28, 1536, 8960, 12, 2, 151936, True, _hf("Qwen/Qwen2.5-1.5B")),
    ModelShape("Qwen2.5-7B", 28, 3584, 18944, 28, 4, 152064, False, _hf("Qwen/Qwen2.5-7B")),
    ModelShape("Qwen2.5-72B", 80, 8192, 29568, 64, 8, 152064, False,
               _hf("Qwen/Qwen2.5-72B")),
    ModelShape("Llama-3.1-8B", 32, 4096, 14336, 32, 8, 128256, False,
               _hf("meta-llama/Llama-3.1-8B")),
    ModelShape("Llama-3.1-70B", 80, 8192, 28672, 64, 8, 128256, False,
               _hf("meta-llama/Llama-3.1-70B")),
    ModelShape("Mistral-7B-v0.3", 32, 4096, 14336, 32, 8, 32768, False,
               _hf("mistralai/Mistral-7B-v0.3")),
)}

#: KV footprints: the dense shapes above (KV cache in bf16, vLLM's default
#: ``kv_cache_dtype=auto`` for these) and DeepSeek-V3's MLA (config.json: kv_lora_rank,
#: qk_rope_head_dim), a mixture-of-experts model with no ModelShape.
PRESETS: dict[str, KVSize] = {
    **{key: model.kv() for key, model in MODELS.items()},
    "deepseek-v3": mla_shape("DeepSeek-V3", 61, 512, 64, source=_hf("deepseek-ai/DeepSeek-V3")),
}


def model_shape(name: str) -> ModelShape:
    """A dense model shape by preset name (case-insensitive); ValueError otherwise."""
    if name.lower() in PRESETS and name.lower() not in MODELS:
        raise ValueError(f"{PRESETS[name.lower()].name} has no dense model shape (a "
                         f"mixture-of-experts MLA model): expected one of "
                         f"{', '.join(m.name for m in MODELS.values())}")
    return _named(MODELS, name, "model preset", PRESETS)


def parse_model_shape(text: str) -> ModelShape:
    """``LAYERS,HIDDEN,INTERMEDIATE,HEADS,KV_HEADS,VOCAB[,tied]``, e.g.
    ``28,1536,8960,12,2,151936,tied``."""
    parts = [part.strip() for part in text.split(",")]
    tied = parts[-1].lower() == "tied"
    numbers = parts[:-1] if tied else parts
    if len(numbers) != 6:
        raise ValueError(f"expected LAYERS,HIDDEN,INTERMEDIATE,HEADS,KV_HEADS,VOCAB[,tied], "
                         f"got {text!r}")
    try:
        values = [int(part) for part in numbers]
    except ValueError:
        raise ValueError(f"expected integers in {text!r}") from None
    return ModelShape(f"shape {text}", *values, tie_word_embeddings=tied)


def preset(name: str) -> KVSize:
    """A preset by name (case-insensitive); ValueError naming the known ones."""
    return _named(PRESETS, name, "model preset", PRESETS)


def parse_shape(text: str) -> KVSize:
    """``LAYERS,KV_HEADS,HEAD_DIM[,DTYPE]`` (standard formula), e.g. ``28,2,128,bf16``."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) not in (3, 4):
        raise ValueError(f"expected LAYERS,KV_HEADS,HEAD_DIM[,DTYPE], got {text!r}")
    try:
        layers, heads, dim = (int(part) for part in parts[:3])
    except ValueError:
        raise ValueError(f"expected integers in LAYERS,KV_HEADS,HEAD_DIM, got {text!r}") \
            from None
    return shape(f"shape {text}", layers, heads, dim, parts[3] if len(parts) == 4 else "bf16")
