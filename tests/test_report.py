"""pipeline.report: captions hold the lab's findings; the page is offline and renders."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest

from conftest import KVLAB, ROOT
from kvlab.scenario import run
from pipeline.ttft.attribution import attribute_tiers
from pipeline.charts.provenance import provenance_block
from pipeline.ttft.latency import latency_model, predict
from pipeline.report import write_report
from pipeline.sweeps import AGGREGATE_SCHEMA
from pipeline.workloads.measured_file import load_measured

SCENARIO = {"docs": 10, "tokens": 5011, "passes": ["fwd", "fwd", "rev"],
            "gpu_spec_points": [21520, 30000, 40000, 45000, 50109, 50110],
            "cpu_spec_points": [0, 20000, 30000, 40000, 50109, 50110, 56000],
            "cpu_sweep_gpu": 21520, "offload_cpu": 56000}
WORKING_SET = SCENARIO["docs"] * SCENARIO["tokens"]
CHARTS = 7
CONSOLE = re.compile(r':CONSOLE[:(]?\d*\)?\]\s*"(?P<message>.*)", source: (?P<source>.*)')
EXTERNAL = re.compile(r"""(?:\bsrc|\bhref)\s*=\s*["']?\s*(?:https?:)?//"""
                      r"""|@import|url\(\s*["']?https?:""", re.IGNORECASE)


# --------------------------------------------------------------------------- inputs


def sweep_rows(sweep: str, gpu: int, cpu: int) -> list[dict]:
    """One aggregates row per pass of one simulated (gpu, cpu) point."""
    passes = run(gpu=gpu, cpu=cpu, docs=SCENARIO["docs"], tokens=SCENARIO["tokens"],
                 passes=SCENARIO["passes"])["passes"]
    return [{"sweep": sweep, "gpu_capacity": gpu, "cpu_capacity": cpu, "pass_index": index,
             "pass_order": p["order"], "accesses": p["gpu_hits"] + p["cpu_hits"] + p["misses"],
             "gpu_hits": p["gpu_hits"], "cpu_hits": p["cpu_hits"], "misses": p["misses"]}
            for index, p in enumerate(passes)]


def build_aggregates() -> pl.DataFrame:
    """A modest version of the lead's three sweeps, straight from kvlab.scenario.run."""
    top = int(1.25 * WORKING_SET)
    gpus = sorted({*range(0, top + 1, 2500), *SCENARIO["gpu_spec_points"]})
    cpus = sorted({*range(0, top + 1, 2500), *SCENARIO["cpu_spec_points"]})
    points = ([("gpu_cliff", g, 0) for g in gpus]
              + [("cpu_cliff", SCENARIO["cpu_sweep_gpu"], c) for c in cpus]
              + [("grid", g, c) for g in (0, 10000, 21520, 40000, 50110, 60000)
                 for c in (0, 20000, 40000, 50110, 60000)])
    rows = [row for point in points for row in sweep_rows(*point)]
    return pl.DataFrame(rows, schema=AGGREGATE_SCHEMA)


def build_requests() -> pl.DataFrame:
    """data/ttft.jsonl with the simulator's tier per request, as the pipeline builds it."""
    return attribute_tiers(load_measured(str(ROOT / "data" / "ttft.jsonl")))


@pytest.fixture(scope="module")
def inputs() -> dict:
    aggregates, requests = build_aggregates(), build_requests()
    latencies = latency_model(requests)
    return {"aggregates": aggregates, "requests": requests,
            "provenance": json.loads((KVLAB / "measured_source.json").read_text()),
            "scenario": SCENARIO, "predicted": predict(aggregates, latencies),
            "latencies": latencies}


@pytest.fixture(scope="module")
def report(inputs, tmp_path_factory) -> Path:
    return write_report(tmp_path_factory.mktemp("report") / "report.html", **inputs)


def captions(text: str) -> list[str]:
    return re.findall(r"<figcaption>(.*?)</figcaption>", text, re.DOTALL)


# --------------------------------------------------------------------------- page content


def test_report_is_one_offline_file(report):
    text = report.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert EXTERNAL.search(text) is None, EXTERNAL.search(text)
    assert "<script src" not in text.lower() and "<link" not in text.lower()
    assert "vegaEmbed" in text and text.count('class="chart"') == CHARTS
    assert [p.name for p in report.parent.iterdir()] == ["report.html"]   # no temp left


def test_captions_state_the_findings(report):
    gpu, cpu, grid, tiers, ttft, ratio, predicted = captions(report.read_text(encoding="utf-8"))
    assert "GPU hit 30.4 ms, CPU reload 48.1 ms, recompute 576 ms" in predicted
    assert "576 ms below GPU 50110 and 30.4 ms from it" in predicted
    assert "50110 tokens or more gives 48.1 ms" in predicted
    assert "hits are 0 at every GPU capacity up to 50109 tokens (one token short" in gpu
    assert f"all 10 from {WORKING_SET}, the working set (10 × 5011)" in gpu
    assert "misses stay 10 at every CPU capacity up to 50109" in cpu and "0 from 50110" in cpu
    assert "at least 50110 tokens" in grid and "every other cell gets 0%" in grid
    assert "4 GPU hits + 6 misses" in tiers and "4 GPU hits + 6 CPU hits" in tiers
    assert "baseline 576 ms (10 misses)" in ttft and "lmcache 48.6 ms (10 CPU hits)" in ttft
    assert re.search(r"1[12]\.\d\d× \(pass2-replay\)", ratio), ratio
    assert re.search(r"0\.9\d× \(pass1-cold\)", ratio), ratio     # storing costs: below 1


def test_captions_follow_the_data(inputs, tmp_path):
    shifted = inputs["aggregates"].filter(~((pl.col("sweep") == "gpu_cliff")
                                            & (pl.col("gpu_capacity") == 50110)))
    path = write_report(tmp_path / "r.html", **{**inputs, "aggregates": shifted})
    assert "all 10 from 52500" in captions(path.read_text(encoding="utf-8"))[0]


def test_one_config_only_drops_the_ratio_chart(inputs, tmp_path):
    only_baseline = {**inputs, "requests": inputs["requests"].filter(
        pl.col("config") == "baseline")}
    text = write_report(tmp_path / "r.html", **only_baseline).read_text(encoding="utf-8")
    assert text.count('class="chart"') == CHARTS - 1 and "chart-ratio" not in text
    assert "baseline 576 ms (10 misses)." in captions(text)[-2]


def test_provenance_says_synthetic_or_real(report):
    text = report.read_text(encoding="utf-8")
    digest = json.loads((KVLAB / "measured_source.json").read_text())["sha256"]
    assert "SYNTHETIC" in text and digest in text and "data/ttft.jsonl" in text
    real = provenance_block({"source": "/opt/fixtures/kvoffload/ttft.jsonl", "synthetic": False,
                             "sha256": "ab" * 32, "note": "real measurement file"})
    assert "real" in real and "SYNTHETIC" not in real and "ab" * 32 in real


def test_bad_input_keeps_the_old_report(inputs, tmp_path):
    path = tmp_path / "r.html"
    path.write_text("old")
    with pytest.raises(ValueError, match="grid"):
        write_report(path, **{**inputs,
                              "aggregates": inputs["aggregates"].filter(pl.col("sweep") != "grid")})
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["r.html"]


# --------------------------------------------------------------------------- browser


class ChartCounter(HTMLParser):
    """Counts chart containers (div.chart) and those holding an <svg> or <canvas>."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0            # div nesting inside the current chart container
        self.containers: list[str] = []
        self.rendered: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if self.depth:
            self.depth += tag == "div"
            if tag in ("svg", "canvas"):
                self.rendered.add(self.containers[-1])
        elif tag == "div" and "chart" in (attrs.get("class") or "").split():
            self.containers.append(attrs.get("id", ""))
            self.depth = 1

    def handle_endtag(self, tag):
        if self.depth and tag == "div":
            self.depth -= 1


def chromium() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium not installed: run scripts/ensure_chromium.sh")
    return browser


def page_requests(net_log: Path) -> list[str]:
    """URLs the page itself asked for (Chromium's own requests are "not an origin")."""
    events = json.loads(net_log.read_text())["events"]
    return sorted({e["params"]["url"] for e in events
                   if "url" in e.get("params", {})
                   and e["params"].get("initiator", "not an origin") != "not an origin"})


def load_in_chromium(page: Path, scratch: Path) -> tuple[str, list[str], list[str]]:
    """(rendered DOM, console messages, page's network requests) of ``page`` in headless
    Chromium, with every host name unresolvable so nothing can be fetched."""
    net_log = scratch / "net-log.json"
    done = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--no-first-run",
         f"--user-data-dir={scratch / 'profile'}", "--host-resolver-rules=MAP * ~NOTFOUND",
         f"--log-net-log={net_log}", "--virtual-time-budget=5000",
         "--enable-logging=stderr", "--v=0", "--dump-dom", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [f"{m['message']} ({m['source']})"
               for m in map(CONSOLE.search, done.stderr.splitlines()) if m]
    return done.stdout, console, page_requests(net_log)


def rendered_charts(dom: str) -> tuple[int, int]:
    counter = ChartCounter()
    counter.feed(dom)
    return len(counter.containers), len(counter.rendered)


def test_every_chart_renders_offline_without_console_output(report, tmp_path):
    dom, console, requests = load_in_chromium(report, tmp_path)
    assert console == []
    assert requests == []
    assert rendered_charts(dom) == (CHARTS, CHARTS)


def test_browser_check_catches_a_broken_page(report, tmp_path):
    """The same checks fail on a page with a bad spec, a console error and a fetch."""
    broken = tmp_path / "broken.html"
    text = report.read_text(encoding="utf-8")
    broken.write_text(text.replace('"mark": {"type": "rect"', '"mark": {"type": "nonsense"', 1)
                      .replace("</main>", '<script>console.error("kvlab-injected")</script>'
                                          '<img src="http://example.invalid/x.png"></main>'),
                      encoding="utf-8")
    assert EXTERNAL.search(broken.read_text(encoding="utf-8"))
    dom, console, requests = load_in_chromium(broken, tmp_path)
    assert any("kvlab-injected" in line for line in console), console
    assert any("TypeError" in line for line in console), console      # vega's failure
    assert requests == ["http://example.invalid/x.png"]
    assert rendered_charts(dom) == (CHARTS, CHARTS - 1)
