"""--mem-fraction-static: SGLang's KV pool from a GPU's memory, against hand arithmetic, and
its bad input (one line, exit 2, nothing written)."""

from __future__ import annotations

import pytest

from pipeline.cli import main
from pipeline.sizes.model_presets import model_shape, preset
from pipeline.sizes.sglang_memory import GIB, default_fraction, sglang_kv_memory


def test_sglangs_default_fraction_on_an_80_gib_and_a_24_gib_gpu():
    # 80 GiB: chunk 8192, decode graphs to 256; 512 + 1.5 x 8192 + 1/8 x 1024 + 256 x 2
    # + 8 x 58 captured prefill sizes = 13,904 MiB reserved
    assert default_fraction(81920)[0] == round((81920 - 13904) / 81920, 3) == 0.83
    # 24 GiB: chunk 4096, decode graphs to 48, 50 prefill sizes: 7,280 MiB, no 10 GiB floor
    assert default_fraction(24576)[0] == round((24576 - 7280) / 24576, 3)
    # fewer running requests capture fewer decode graphs; a smaller chunk reserves less
    assert default_fraction(81920, max_running_requests=8)[0] >= 0.83
    assert default_fraction(24576, chunked_prefill_size=2048)[0] > default_fraction(24576)[0]


def test_the_pool_is_memory_times_fraction_minus_weights_in_whole_pages():
    shape, kv = model_shape("llama-3.1-8b"), preset("llama-3.1-8b")
    memory = sglang_kv_memory("H100", 80 * GIB, 0.83, "given", shape, kv, page_size=16)
    budget = int(80 * GIB * 0.83) - shape.parameters * 2
    assert memory.budget == budget
    assert memory.tokens == budget // kv.bytes_per_token // 16 * 16
    assert "--mem-fraction-static 0.83 on H100" in memory.line
    with pytest.raises(ValueError, match="leaves no KV memory"):
        sglang_kv_memory("L4", 24 * GIB, 0.5, "given", shape, kv)


def test_simulate_prints_the_arithmetic(tmp_path, capsys):
    argv = ["simulate", "--pattern", "zipf", "--engine", "sglang", "--model", "qwen2.5-1.5b",
            "--gpu-type", "L4", "--mem-fraction-static", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "--mem-fraction-static 0.704 on L4" in out and "SGLang's default" in out


@pytest.mark.parametrize("extra, message", [
    (["--engine", "sglang", "--gpu-memory-utilization", "0.9"],
     "--gpu-memory-utilization is vLLM's: with --engine sglang give --mem-fraction-static"),
    (["--mem-fraction-static", "0.8"], "--mem-fraction-static applies to the sglang engine"),
    (["--engine", "sglang", "--mem-fraction-static", "1.5"], "static fraction is in (0, 1)"),
    (["--engine", "sglang", "--mem-fraction-static", "0.8", "--gpu", "1GiB"],
     "--mem-fraction-static gives --gpu"),
])
def test_bad_input_is_one_line(tmp_path, capsys, extra, message):
    out = tmp_path / "out"
    argv = ["simulate", "--pattern", "zipf", "--model", "qwen2.5-1.5b", "--gpu-type", "H100",
            *extra, "--out", str(out)]
    try:
        status = main(argv)
    except SystemExit as exc:                   # argparse's own errors
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and not out.exists()
