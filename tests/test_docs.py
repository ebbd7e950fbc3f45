"""The REPL sessions in README.md and the module docstrings run as shown."""

import doctest
import sys

import pipeline.latency
import pipeline.stats
from conftest import KVLAB, ROOT


def test_readme_repl_sessions():
    readme = (ROOT / "README.md").read_text()
    sessions = [block.split("\n", 1)[1] for block in readme.split("```")[1::2]
                if block.startswith("python\n")]
    assert sessions
    runner = doctest.DocTestRunner()
    for number, text in enumerate(sessions):
        test = doctest.DocTestParser().get_doctest(text, {}, f"README python block {number}",
                                                   "README.md", 0)
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_module_docstrings(monkeypatch):
    monkeypatch.syspath_prepend(str(KVLAB))        # kvsim's docstring imports it plainly
    import kvsim
    for module in (kvsim, pipeline.latency, pipeline.stats):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
    sys.modules.pop("kvsim", None)
