"""A tiny random-weight LLaMA model in GGUF, written by the project itself (no download).

The vocabulary is built so that text made of the lab's words tokenizes one word to one token
under llama.cpp's SPM tokenizer: ``<unk> <s> </s>``, the 256 byte tokens, and the chains
``▁a``, ``▁ab``, ``▁abc`` for every 3-letter word over a 10-letter alphabet. SPM merges
adjacent symbols only into pieces that are in the vocabulary; the only such merges of
``▁abc`` are the prefix chain, so every word ends as one token (checked against the real
tokenizer by the integration test). Weights are random (seeded): the model emits noise, and a
request forces its output with ``logit_bias`` on one word (``FORCED_WORD``).
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from pipeline.measure.workload import ALPHABET, FORCED_WORD

__all__ = ["ALPHABET", "FORCED_WORD", "ModelShape", "Vocabulary", "vocabulary", "write_model"]

SPACE = "\u2581"                      # SentencePiece's word-boundary mark
BOS_ID, EOS_ID, UNK_ID = 1, 2, 0


@dataclass(frozen=True)
class ModelShape:
    """The model's architecture; the defaults give a ~8 MB f32 file."""

    layers: int = 4
    width: int = 256
    heads: int = 4
    kv_heads: int = 2
    feed_forward: int = 512
    context: int = 8192
    seed: int = 20261003

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def describe(self) -> dict:
        """The shape as a plain dict (for provenance)."""
        return {**asdict(self), "arch": "llama", "dtype": "f32", "vocab": len(vocabulary().tokens)}


@dataclass(frozen=True)
class Vocabulary:
    """Token strings, scores and types (gguf.TokenType values), and the word -> id map."""

    tokens: tuple[str, ...]
    scores: tuple[float, ...]
    types: tuple[int, ...]
    words: dict[str, int]

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (words separated by single spaces), BOS first: what the
        engine's tokenizer gives for this vocabulary. Unknown words raise KeyError."""
        return [BOS_ID, *(self.words[word] for word in text.split(" "))]


def vocabulary() -> Vocabulary:
    """The model's vocabulary (see the module docstring)."""
    import gguf

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{byte:02X}>" for byte in range(256)]
    types = ([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
             + [gguf.TokenType.BYTE] * 256)
    pieces = [SPACE + "".join(letters) for n in (1, 2, 3)
              for letters in itertools.product(ALPHABET, repeat=n)]
    words = {}
    for piece in pieces:
        if len(piece) == 4:
            words[piece[1:]] = len(tokens)
        tokens.append(piece)
        types.append(gguf.TokenType.NORMAL)
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    return Vocabulary(tuple(tokens), tuple(scores), tuple(int(t) for t in types), words)


def write_model(path: str | Path, shape: ModelShape = ModelShape()) -> Path:
    """Write the GGUF file to ``path`` (atomically: a temporary name, then a rename)."""
    import gguf

    path = Path(path)
    vocab = vocabulary()
    rng = np.random.default_rng(shape.seed)

    def weight(*dims: int) -> np.ndarray:
        return rng.normal(0.0, 0.02, size=dims).astype(np.float32)

    tmp = path.with_name(f".tmp-{path.name}")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name("kvlab-tiny-random")
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.width)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.feed_forward)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(list(vocab.tokens))
    writer.add_token_scores(list(vocab.scores))
    writer.add_token_types(list(vocab.types))
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_unk_token_id(UNK_ID)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(True)

    n_vocab, kv_width = len(vocab.tokens), shape.kv_heads * shape.head_dim
    writer.add_tensor("token_embd.weight", weight(n_vocab, shape.width))
    writer.add_tensor("output_norm.weight", np.ones(shape.width, dtype=np.float32))
    writer.add_tensor("output.weight", weight(n_vocab, shape.width))
    for block in range(shape.layers):
        prefix = f"blk.{block}."
        writer.add_tensor(prefix + "attn_norm.weight", np.ones(shape.width, dtype=np.float32))
        writer.add_tensor(prefix + "attn_q.weight", weight(shape.width, shape.width))
        writer.add_tensor(prefix + "attn_k.weight", weight(kv_width, shape.width))
        writer.add_tensor(prefix + "attn_v.weight", weight(kv_width, shape.width))
        writer.add_tensor(prefix + "attn_output.weight", weight(shape.width, shape.width))
        writer.add_tensor(prefix + "ffn_norm.weight", np.ones(shape.width, dtype=np.float32))
        writer.add_tensor(prefix + "ffn_gate.weight", weight(shape.feed_forward, shape.width))
        writer.add_tensor(prefix + "ffn_up.weight", weight(shape.feed_forward, shape.width))
        writer.add_tensor(prefix + "ffn_down.weight", weight(shape.width, shape.feed_forward))
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    tmp.replace(path)
    return path
