"""One command layer: each command parses once into a frozen options object, which no command
changes (what it works out is a new object, ``derive``); ``plan``'s modes refuse the options
they do not use and name the models they ran; ``pipeline/simulate.py`` is the ``simulate``
command."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from conftest import cli_in_process
from pipeline import cli
from pipeline.base.arguments import Options, derive, freeze

PATTERN = ["--pattern", "zipf", "--num-documents", "3", "--document-length", "40",
           "--num-requests", "6"]
GROUPS = ["--pattern", "groups", "--groups", "2", "--users", "1", "--questions", "1",
          "--system-prompt-length", "32", "--question-length", "16", "--output-tokens", "2",
          "--jobs", "1", "--model", "qwen2.5-1.5b"]
#: one small run of each command that sizes, plans or simulates (sizes and lists included,
#: so that a conversion in place would show)
RUNS = {
    "blocks": ["blocks", "--docs", "2", "--tokens", "64", "--passes", "fwd,fwd",
               "--gpu", "0.001GiB", "--cpu", "64", "--model", "qwen2.5-1.5b"],
    "trace": ["trace", *PATTERN, "--gpu", "32,64", "--cpu", "0,4blocks", "--no-report",
              "--json"],
    "policies": ["policies", "--docs", "3", "--tokens", "50", "--capacities", "50,100",
                 "--json"],
    "plan": ["plan", "--docs", "3", "--tokens", "500", "--target-hit-ratio", "0.3",
             "--gpu", "600", "--json"],
    "plan-blocks": ["plan", *PATTERN, "--target-hit-ratio", "0.2", "--gpu", "64", "--json"],
    "plan-load": ["plan", *PATTERN, "--target-ttft-p90-ms", "1000", "--latency", "roofline",
                  "--model", "qwen2.5-1.5b", "--concurrency", "2", "--json"],
    "plan-fleet": ["plan", *GROUPS, "--fleet", "--instances", "1", "--gpu", "40blocks",
                   "--target-hit-ratio", "0.1", "--json"],
    "simulate": ["simulate", *PATTERN, "--gpu", "64blocks", "--cpu", "8blocks",
                 "--concurrency", "2", "--out", "OUT/sim"],
    "simulate-curves": ["simulate", *PATTERN, "--gpu", "512,1024", "--rate", "1,2",
                        "--latency", "roofline", "--model", "qwen2.5-1.5b", "--out",
                        "OUT/curves"],
    "fleet": ["fleet", *GROUPS, "--gpu", "40blocks,60blocks", "--out", "OUT/fleet",
              "--json"],
}


def test_options_are_frozen_dataclasses():
    parser = cli.build_parser(load=["simulate"])
    options = freeze(parser.parse_args(["simulate", "--gpu", "64", "--out", "o"]))
    assert dataclasses.is_dataclass(options) and isinstance(options, Options)
    given = options.gpu
    assert type(options).__name__ == "SimulateOptions" and given[0].text == "64"
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.gpu = [128]
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.num_gpu_blocks = 4                      # nor a new name
    changed = derive(options, gpu=[128], num_gpu_blocks=8)
    assert (options.gpu, changed.gpu, changed.num_gpu_blocks) == (given, [128], 8)
    assert "num_gpu_blocks" not in options and "num_gpu_blocks" in changed
    assert freeze(options) is options


@pytest.mark.parametrize("name", RUNS)
def test_no_command_changes_its_options(name, tmp_path, monkeypatch):
    """The object each command is handed stays as parsed, deep inside too (a list of
    capacities converted in place would differ)."""
    handed = []

    def frozen(namespace):
        options = freeze(namespace)
        handed.append((options, copy.deepcopy(vars(options))))
        return options

    monkeypatch.setattr(cli, "freeze", frozen)
    argv = [part.replace("OUT", str(tmp_path)) for part in RUNS[name]]
    done = cli_in_process(*argv)
    assert done.returncode in (0, 1), done.stderr       # plan: 1 when the target is unmet
    [(options, before)] = handed
    assert vars(options) == before


@pytest.mark.parametrize("argv, message", [
    (["--target-hit-ratio", "0.5", "--speed", "2"], "--speed: not with the measured TTFT"),
    (["--target-ttft-ms", "100", "--served-model", "m"], "--served-model: not with the "
                                                          "measured"),
    (["--target-hit-ratio", "0.5", "--latency", "f.json", "--measured-docs", "3"],
     "--measured-docs: not with --latency"),
    (["--target-hit-ratio", "0.5", "--latency", "f.json", "--max-num-seqs", "3"],
     "--max-num-seqs: not with --latency"),
    ([*PATTERN, "--target-ttft-p90-ms", "100", "--pass", "2"], "--pass: not with "
                                                               "--target-ttft-p90-ms"),
    ([*PATTERN, "--target-ttft-p90-ms", "100", "--measured-gpu", "9"], "--measured-gpu: "
                                                                       "not with"),
    ([*GROUPS, "--fleet", "--target-hit-ratio", "0.5", "--docs", "3"], "--docs: not with "
                                                                       "--fleet"),
    ([*GROUPS, "--fleet", "--target-hit-ratio", "0.5", "--cpu-order", "tail-first"],
     "--cpu-order: not with --fleet"),
])
def test_plan_modes_refuse_options_they_do_not_use(argv, message):
    done = cli_in_process("plan", *argv)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"python -m pipeline plan: error: {message}"), line


@pytest.mark.parametrize("name", ["plan", "plan-blocks", "plan-load", "plan-fleet"])
def test_each_plan_mode_names_the_models_it_ran(name, tmp_path):
    """--json: ``cache_models``; text: the first line says ``models:``."""
    argv = RUNS[name]
    answer = json.loads(cli_in_process(*argv).stdout)
    assert set(answer["cache_models"]) == {"gpu", "cpu"}
    text = cli_in_process(*[part for part in argv if part != "--json"]).stdout
    assert text.splitlines()[0].startswith("models: ")


def test_simulate_command_is_the_stage_module():
    from pipeline import simulate
    from pipeline.onepass import events
    assert cli.COMMANDS["simulate"].module == "pipeline.simulate"
    assert cli.command_module("simulate") is simulate
    assert callable(simulate.main) and callable(simulate.add_arguments)
    # the lab's document-mode events stay reachable for their callers
    assert simulate.document_events is events.simulate
    assert simulate.METHODS == events.METHODS
