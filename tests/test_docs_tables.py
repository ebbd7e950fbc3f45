"""The tables of the pages are what the commands and exports say: the engine models'
(docs/engines.md), the lab's block orders (docs/blocks.md), the policies in block mode
(docs/policies.md) and the lab's findings (README.md, from kvlab/*.json)."""

import re

from pipeline.commands.blocks import run_blocks

from conftest import ROOT


def section_rows():
    section = (ROOT / "docs" / "engines.md").read_text().split("\n## ", 1)[0]
    return [[cell.strip() for cell in line.strip("|").split("|")]
            for line in section.splitlines() if re.match(r"\| \d", line)]


def number(text):
    return int(text.replace(",", ""))


def test_engine_tables_match_the_command():
    rows = section_rows()
    gpu_rows = [r for r in rows if len(r) == 4 and "/" not in r[1]]
    cpu_rows = [r for r in rows if len(r) == 4 and "/" in r[1]]
    assert len(gpu_rows) == 4 and len(cpu_rows) == 4
    for capacity, lru, vllm, old in gpu_rows:
        got = [run_blocks(gpu=number(capacity), passes=["fwd", "fwd"], gpu_model=model,
                          gpu_options=options)["passes"][1]["gpu_hit_tokens"]
               for model, options in (("block-lru", None), ("vllm", None),
                                      ("vllm", {"vllm_version": "0.11.0"}))]
        assert got == [number(lru), number(vllm), number(old)]
    for capacity, *passes in cpu_rows:
        result = run_blocks(gpu=21520, cpu=number(capacity), gpu_model="vllm",
                            cpu_model="lmcache")["passes"]
        assert [[p["gpu_hit_tokens"], p["cpu_hit_tokens"], p["miss_tokens"]] for p in result] \
            == [[number(x) for x in cell.split(" / ")] for cell in passes]


def test_block_order_table_matches_the_command():
    page = (ROOT / "docs" / "blocks.md").read_text()
    section = page.split("**The lab's cyclic workload under both orders**", 1)[1]
    rows = [line for line in section.split("\n\n", 2)[1].splitlines()
            if line.startswith("| ") and " / " in line]
    assert len(rows) == 6
    for line in rows:
        gpu, tail, head = [cell.strip().replace(",", "").replace("*", "")
                           for cell in line.strip("|").split("|")]
        gpu = int(gpu.split()[0])
        for order, cell in (("tail-first", tail), ("head-first", head)):
            got = run_blocks(gpu=gpu, passes=["fwd", "fwd", "rev"], gpu_order=order)
            assert [p["gpu_hit_tokens"] for p in got["passes"]] == \
                [int(v) for v in cell.split(" / ")], (gpu, order)


def test_policy_block_mode_table_matches_the_command():
    page = (ROOT / "docs" / "policies.md").read_text()
    lines = page.split("| order | lru, fifo, lfu, clock, sieve, arc | mru | s3fifo | opt |", 1)[1]
    header = ["lru, fifo, lfu, clock, sieve, arc", "mru", "s3fifo", "opt"]
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in lines.strip().splitlines()[1:3]]
    assert [row[0] for row in rows] == ["tail-first", "head-first"]
    for order, *cells in rows:
        for names, cell in zip(header, cells):
            for name in names.split(", "):
                got = run_blocks(gpu=21520, passes=["fwd", "fwd", "rev"], gpu_model=name,
                                 gpu_order=order)
                assert [p["gpu_hit_tokens"] for p in got["passes"]] == \
                    [int(v) for v in cell.split(" / ")], (name, order)


def test_readme_findings_are_the_exports():
    import json
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Findings of the lab", 1)[1].split("\n## ", 1)[0]
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    export = {name: json.loads((ROOT / "kvlab" / f"{name}.json").read_text())
              for name in ("baseline", "cliff", "offload", "cpu_cliff", "measured")}
    zero = [gpu for gpu, hits in export["cliff"].items() if hits == 0]
    full = [gpu for gpu, hits in export["cliff"].items() if hits == 10]
    assert f"0 hits at GPU {', '.join(zero)}; all 10 at {full[0]}" in table
    assert f"third pass hits docs {export['baseline']['passes'][2]['hit_docs']}" in table
    second, third = export["offload"]["passes"][1:]
    assert f"pass 2 = {second['cpu_hits']} CPU hits" in table
    assert f"pass 3 = {third['gpu_hits']} GPU + {third['cpu_hits']} CPU hits" in table
    missing = [cpu for cpu, misses in export["cpu_cliff"].items() if misses == 10]
    assert f"misses 10 at CPU {missing[0]} .. {missing[-1]}" in table
    m = export["measured"]
    for pass_name, words in (("pass2-replay", "pass 2 p50 {} ms recomputing vs {} ms"),
                             ("pass3-reverse", "pass 3 p50 {} vs {} ms")):
        assert words.format(m["baseline"][pass_name]["p50_ms"],
                            m["lmcache"][pass_name]["p50_ms"]) in table
        assert f"{m['ratio'][pass_name]['p50']}" in table
    cold = "pass1-cold"
    assert f"({m['lmcache'][cold]['p50_ms']} vs {m['baseline'][cold]['p50_ms']} ms, ratio " \
           f"{m['ratio'][cold]['p50']})" in table
