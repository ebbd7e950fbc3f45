"""The REPL sessions of README.md and the docs pages, and the module docstrings, run as shown."""

import doctest
import sys

import pipeline.sizes.units
import pipeline.ttft.latency
import pipeline.sizes.model_presets
import pipeline.base.stats
from conftest import KVLAB, ROOT


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_repl_sessions_of_the_pages():
    runner = doctest.DocTestRunner()
    count = 0
    for page in PAGES:
        sessions = [block.split("\n", 1)[1] for block in page.read_text().split("```")[1::2]
                    if block.startswith("python\n")]
        for number, text in enumerate(sessions):
            name = f"{page.relative_to(ROOT)} python block {number}"
            runner.run(doctest.DocTestParser().get_doctest(text, {}, name, str(page), 0))
            count += 1
    assert count >= 2
    assert runner.summarize(verbose=False).failed == 0


def test_module_docstrings(monkeypatch):
    monkeypatch.syspath_prepend(str(KVLAB))        # kvsim's docstring imports it plainly
    import kvsim
    for module in (kvsim, pipeline.ttft.latency, pipeline.base.stats, pipeline.sizes.units,
                   pipeline.sizes.model_presets):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
    sys.modules.pop("kvsim", None)
