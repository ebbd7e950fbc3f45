"""Every command shown in README.md and the docs pages runs and prints what the page shows.

The convention (console blocks, ``$ `` lines, expected lines, ``[exit N]``, skip comments) is
in tests/docs_commands.py and docs/extending.md. The commands run in a copy of the checkout
(so a page's ``run`` or ``make_exports.py`` never touches this one), with ``../shared`` beside
it when the shared data is here (or KVLAB_SHARED names it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, SHARED
from docs_commands import as_plan, missing_lines, page_commands

PAGES = sorted([ROOT / "README.md", ROOT / "data" / "README.md",
                ROOT / "data" / "measured" / "README.md", *(ROOT / "docs").glob("*.md")])
COMMANDS = [c for page in PAGES for c in page_commands(page, ROOT)]
#: What a copy of the checkout leaves out: generated outputs and the environment.
NOT_COPIED = shutil.ignore_patterns(".git", ".venv", ".hypothesis", ".pytest_cache",
                                    "*.egg-info", "events", "exports", "*.html")


def not_copied(folder, names):
    """NOT_COPIED, and the package's __pycache__ folders (share_package_caches links them)."""
    skip = NOT_COPIED(folder, names)
    if Path(folder).resolve().is_relative_to(ROOT / "pipeline") and "__pycache__" in names:
        skip.add("__pycache__")
    return skip


def share_package_caches(copy):
    """The copy's ``pipeline/**/__pycache__`` are links to this checkout's, so the commands
    load numba's kernels compiled by the tests (the copy's sources keep their times and
    sizes) and what they compile serves the tests too: on a clean clone each kernel compiles
    once, not once more in the copy. (No page command writes into ``pipeline/``.)

    With NUMBA_CACHE_DIR set, numba keeps a package's kernels in a folder of that directory
    named from the hash of the package's path: the copy's folders there are links to this
    checkout's, for the same reason."""
    cache_dir = os.environ.get("NUMBA_CACHE_DIR")
    package = Path(os.path.realpath(ROOT / "pipeline"))
    copied = Path(os.path.realpath(copy / "pipeline"))
    for folder in sorted({source.parent for source in package.rglob("*.py")}):
        cache = folder / "__pycache__"
        cache.mkdir(exist_ok=True)
        link = copied / cache.relative_to(package)
        if not link.is_symlink():
            link.symlink_to(cache, target_is_directory=True)
        if cache_dir:
            from numba.core.caching import UserProvidedCacheLocator
            subpath = UserProvidedCacheLocator.get_suitable_cache_subpath
            shared = Path(cache_dir) / subpath(str(folder / "x.py"))
            shared.mkdir(parents=True, exist_ok=True)
            link = Path(cache_dir) / subpath(str(copied / folder.relative_to(package) / "x.py"))
            if not link.is_symlink() and not link.exists():
                link.symlink_to(shared, target_is_directory=True)


def runnable():
    """The commands to run here: not skipped, and with their shared data present."""
    return [c for c in COMMANDS
            if c.skip is None and ("../shared/" not in c.text or SHARED.is_dir())]


@pytest.fixture(scope="module")
def docs_run(tmp_path_factory):
    """Run every runnable command once, in order, in a copy of the checkout: (results by
    command name, the folder that holds the copy and the commands' /tmp/)."""
    base = tmp_path_factory.mktemp("docs")
    copy = base / "repo"
    shutil.copytree(ROOT, copy, ignore=not_copied)
    share_package_caches(copy)
    if (ROOT / ".venv").is_dir():
        (copy / ".venv").symlink_to(ROOT / ".venv")
    if SHARED.is_dir():
        (base / "shared").symlink_to(SHARED)
    (base / "tmp").mkdir()
    plan, result = base / "plan.json", base / "result.json"
    plan.write_text(json.dumps(as_plan(runnable())))
    done = subprocess.run([sys.executable, str(copy / "tests" / "docs_commands.py"), str(plan),
                           str(result), str(base / "tmp")], cwd=copy, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["name"]: r for r in json.loads(result.read_text())}, base


@pytest.fixture(scope="module")
def results(docs_run):
    return docs_run[0]


def test_the_pages_show_commands_and_every_skip_says_why():
    assert {c.page for c in COMMANDS} >= {"README.md", "docs/extending.md"}
    for command in COMMANDS:
        assert command.skip is None or command.skip != "no reason given", command.name


def test_matching_rules():
    output = "a line\nanswer: 1,234 tokens = 0.5 GiB\nlast\n"
    assert missing_lines(["answer: 1,234 tokens = ... GiB", "...", "last"], output) == []
    assert missing_lines(["last", "a line"], output) == ["a line"]        # in order
    assert missing_lines(["a lin"], output) == ["a lin"]                  # whole lines


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_command_prints_what_the_page_shows(command, request):
    if command.skip is not None:
        pytest.skip(f"{command.name}: {command.skip}")
    if "../shared/" in command.text and not SHARED.is_dir():
        pytest.skip(f"{command.name}: the shared trace folder {SHARED} is absent")
    got = request.getfixturevalue("results")[command.name]
    assert got["status"] == command.status, (command.text, got["output"][-2000:])
    assert missing_lines(command.expected, got["output"]) == [], \
        (command.text, got["output"][-4000:])


def test_the_schemas_page_names_every_column_the_commands_wrote(docs_run):
    import pyarrow.parquet as pq
    _, base = docs_run
    page = (ROOT / "docs" / "schemas.md").read_text()
    files = sorted(base.rglob("*.parquet"))
    assert any(f.name == "gpu_cliff.parquet" for f in files)
    for path in files:
        for name in pq.read_schema(path).names:
            assert f"`{name}`" in page, (path.relative_to(base), name)


def test_every_file_and_module_the_pages_name_exists():
    """Backquoted repository paths exist (generated outputs and NAME placeholders aside) and
    dotted ``pipeline.`` names resolve, so a moved module shows here first."""
    import importlib
    import re
    paths = re.compile(r"`((?:pipeline|tests|scripts|kvlab|data|docs)/[A-Za-z0-9_./-]*)`")
    dotted = re.compile(r"`(pipeline(?:\.[A-Za-z_]\w*)+)")
    for page in PAGES:
        text = page.read_text()
        for path in paths.findall(text):
            generated = path.startswith(("data/events", "data/exports"))
            if generated or re.search(r"\b(NAME|FORMAT)\b", path):
                continue
            assert (ROOT / path.rstrip("/")).exists(), (page.name, path)
        for name in dotted.findall(text):
            parts = name.split(".")
            for cut in range(len(parts), 0, -1):
                try:
                    obj = importlib.import_module(".".join(parts[:cut]))
                    break
                except ImportError:
                    continue
            for attribute in parts[cut:]:
                assert hasattr(obj, attribute), (page.name, name)
                obj = getattr(obj, attribute)


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    import re
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_between_the_pages_resolves():
    import re
    for page in [*PAGES, ROOT / "CHANGELOG.md"]:
        for target, _, fragment in re.findall(r"\]\(([^)#\s]*)(#([^)\s]+))?\)", page.read_text()):
            if target.startswith("http"):
                continue
            path = (page.parent / target).resolve() if target else page
            assert path.exists(), (page.name, target)
            if fragment and path.suffix == ".md":
                headings = [anchor(line.lstrip("#")) for line in path.read_text().splitlines()
                            if line.startswith("#")]
                assert fragment in headings, (page.name, target, fragment)


def _inline_commands() -> list[tuple[str, list[str]]]:
    """(page, words) of every ``python -m ...`` named inline in backquotes on the pages."""
    import re
    import shlex
    found = []
    for page in PAGES:
        for text in re.findall(r"`(?:\.venv/bin/)?python3? -m ([^`]+)`", page.read_text()):
            found.append((str(page.relative_to(ROOT)), shlex.split(text.replace("...", ""))))
    return found


def test_every_command_named_inline_exists_with_its_options():
    """``python -m pipeline CMD --opt`` in prose names a command and options it has;
    ``python -m MODULE`` a module that runs as a script (a moved module shows here)."""
    import re
    from importlib.util import find_spec
    from pipeline.cli import COMMANDS
    inline = _inline_commands()
    assert len(inline) > 20
    helps: dict[str, str] = {}
    for page, words in inline:
        if words[0] != "pipeline":
            if words[0].startswith("pipeline."):
                spec = find_spec(words[0])
                assert spec is not None, (page, words)
                assert '__name__ == "__main__"' in Path(spec.origin).read_text(), (page, words)
            continue
        if len(words) == 1 or words[1] in ("COMMAND", "--help"):
            continue
        assert words[1] in COMMANDS, (page, words)
        if words[1] not in helps:
            _, helps[words[1]] = run_help(words[1])
        for option in (w.split("=")[0] for w in words[2:] if re.match(r"--[a-z]", w)):
            assert re.search(rf"{re.escape(option)}\b", helps[words[1]]), (page, words, option)


def run_help(command: str) -> tuple[int, str]:
    from docs_commands import run_in_process
    return run_in_process([command, "--help"])


def test_the_readme_command_table_lists_every_command():
    """The README's command table: one row per command of ``python -m pipeline --help``,
    in its order, none stale."""
    from pipeline.cli import COMMANDS
    section = (ROOT / "README.md").read_text().split("\n## Commands\n", 1)[1].split("\n## ")[0]
    rows = [line.split("|")[1].strip().strip("`") for line in section.splitlines()
            if line.startswith("| `")]
    assert sorted(rows) == sorted(COMMANDS), (rows, list(COMMANDS))
