"""The trace report's numbers: the exact half crossing (from the one-pass distances, not a
grid point), GiB beside tokens when sizes were given, thousands separators."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import SYNTHETIC_TRACE, needs_shared_trace
from hypothesis import given
from hypothesis import strategies as st

from pipeline.workloads.stream import ORDERS
from pipeline.cli import main
from pipeline.trace import engine
from test_trace_engine import prompts, stream_of

SYNTHETIC = SYNTHETIC_TRACE
PATTERN = ["--pattern", "multi-tenant", "--users", "3", "--num-documents", "4",
           "--document-length", "3000", "--system-prompt-length", "100"]


@given(prompt_list=prompts, block_size=st.integers(1, 3), order=st.sampled_from(ORDERS),
       needed=st.integers(0, 30), low=st.integers(-1, 20), width=st.integers(0, 30))
def test_gpu_crossing_is_the_first_capacity_with_enough_hits(prompt_list, block_size, order,
                                                            needed, low, width):
    stream = stream_of(prompt_list, block_size)
    high = low + width
    capacities = np.arange(low + 1, high + 1)
    hits = engine.gpu_curve(stream, capacities * block_size, order)
    enough = capacities[hits >= needed]
    expected = int(enough[0]) if enough.size else None
    assert engine.gpu_crossing(stream, order, needed, low, high) == expected


def _caption(page: str, key: str) -> str:
    return re.search(rf'id="chart-{key}"></div><figcaption>(.*?)</figcaption>', page).group(1)


def _report(tmp_path, capsys, *extra: str) -> str:
    report = tmp_path / "t.html"
    assert main(["trace", *PATTERN, *extra, "--out", str(tmp_path / "o"), "--report",
                 str(report)]) == 0
    capsys.readouterr()
    return report.read_text()


@pytest.fixture(scope="module")
def plain_page(tmp_path_factory) -> str:
    """The pattern's report without sizes, rendered once for the tests that only read it."""
    import contextlib
    import io

    folder = tmp_path_factory.mktemp("plain")
    report = folder / "t.html"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["trace", *PATTERN, "--out", str(folder / "o"), "--report",
                     str(report)]) == 0
    return report.read_text()


def _without_script(page: str) -> str:
    return re.sub(r"<script.*?</script>", "", page, flags=re.S)


#: a number of four or more digits written without thousands separators
BARE = re.compile(r"(?<![\d,.])\d{4,}(?![\d,.])")


def test_sizes_given_as_sizes_get_gib_beside_tokens(tmp_path, capsys):
    page = _report(tmp_path, capsys, "--model", "llama-3.1-8b", "--gpu", "0,64MiB")
    caption = _caption(page, "trace-gpu")
    tokens, gib = re.search(r"reaches half .*? at ([\d,]+) tokens \(([\d,.]+) GiB\)",
                            caption).groups()
    half = int(tokens.replace(",", ""))
    assert float(gib.replace(",", "")) == pytest.approx(half * 131072 / 2**30, abs=0.01)
    assert "GPU 512 tokens (0.07 GiB)" in _caption(page, "trace-cpu")   # 64 MiB, rounded up
    assert "GiB of Llama-3.1-8B below" in page and "131,072 bytes per token" in page


def test_every_number_has_thousands_separators(plain_page):
    page = plain_page
    assert "GiB" not in _without_script(page)          # no sizes given: tokens only
    for key in ("trace-gpu", "trace-cpu", "trace-orders", "trace-reuse"):
        assert not BARE.search(_caption(page, key)), _caption(page, key)
    lede = re.search(r'<p class="lede">(.*?)</p>', page, re.S).group(1)
    assert not BARE.search(lede), lede


def test_the_half_crossing_is_the_first_capacity_that_reaches_it(tmp_path, capsys):
    """The block-lru engine's caption: its capacity reaches half the infinite-cache block
    hits; one block less does not (the grid's point would be above it)."""
    from pipeline.workloads.stream import block_stream
    from pipeline.commands.trace import load_workload
    from pipeline.cli import build_parser

    page = _report(tmp_path, capsys, "--gpu-model", "block-lru")
    half = int(re.search(r"reaches half .*? at ([\d,]+) tokens", _caption(page, "trace-gpu"))
               .group(1).replace(",", ""))
    args = build_parser().parse_args(["trace", *PATTERN])
    workload = load_workload(args)
    stream = block_stream(workload.blocks, workload.block_size)
    needed = (round(engine.infinite(stream).block_hit_ratio * stream.blocks) + 1) // 2
    hits = engine.gpu_curve(stream, np.array([half - stream.block_size, half]), "tail-first")
    assert hits[0] < needed <= hits[1]
    assert half not in engine.curve_grid(stream).tolist()        # not a grid point here


@needs_shared_trace
def test_shared_trace_half_crossing_is_the_exact_one(tmp_path, capsys):
    """The block-lru engine's crossing is exact; vllm's (the default), run at each capacity
    of the grid, is the grid's point and the caption says so."""
    captions = []
    for model in ("block-lru", "vllm"):
        report = tmp_path / f"{model}.html"
        assert main(["trace", str(SYNTHETIC), "--model", "llama-3.1-8b", "--gpu",
                     "0,2GiB,20GiB", "--gpu-model", model, "--out", str(tmp_path / model),
                     "--report", str(report)]) == 0
        capsys.readouterr()
        captions.append(_caption(report.read_text(), "trace-gpu"))
    assert "at 3,057,664 tokens (373.25 GiB)" in captions[0]      # not the grid's 3166208
    assert "by the chart&#x27;s capacity of 3,166,208 tokens" in captions[1]
    assert all("20,555,776 tokens (2,509.25 GiB)" in caption for caption in captions)
