"""python -m pipeline: one command end to end, its outputs, and its bad-input errors.

The commands run in this process (conftest.cli_in_process: the same ``main`` as ``python -m
pipeline``, its output captured and its exit status returned); one test runs the real
``python -m pipeline`` to check the status a shell sees.
"""

import json
import subprocess
import sys

import polars as pl
import pytest

from conftest import KVLAB, ROOT, cli_in_process, run_outputs
from unrendered import without_report


def pipeline(*args):
    return cli_in_process(*args)



@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("run")
    proc = pipeline("run", "--measured", str(ROOT / "data" / "ttft.jsonl"), "--points", "24",
                    "--grid-steps", "6", *run_outputs(tmp_path))
    return tmp_path, proc


def test_run_writes_every_output_and_says_where(full_run):
    tmp_path, proc = full_run
    assert proc.returncode == 0, proc.stderr
    assert str(tmp_path / "events") in proc.stdout and "index.html" in proc.stdout
    assert "sweep 3/3" in proc.stderr                           # progress while sweeping
    for name in ("gpu_cliff", "cpu_cliff", "grid", "aggregates", "measured_requests"):
        assert (tmp_path / "events" / f"{name}.parquet").exists()
    for name in ("cyclic.json", "baseline.json", "cliff.json", "offload.json", "cpu_cliff.json",
                 "measured.json"):
        assert json.loads((tmp_path / "exports" / name).read_text()) == json.loads(
            (KVLAB / name).read_text()), name
    assert (tmp_path / "exports" / "ttft.jsonl").read_bytes() == (
        ROOT / "data" / "ttft.jsonl").read_bytes()
    assert (tmp_path / "report" / "index.html").stat().st_size > 100_000


def test_run_attributes_measured_requests_to_tiers(full_run):
    tmp_path, proc = full_run
    requests = pl.read_parquet(tmp_path / "events" / "measured_requests.parquet")
    reverse = requests.filter(pl.col("config") == "lmcache", pl.col("pass") == "pass3-reverse")
    assert reverse["tier"].cast(pl.String).value_counts(sort=True).rows() == [("cpu", 6),
                                                                             ("gpu", 4)]
    assert "separate" in proc.stderr


def test_any_offload_capacity_is_swept_for_the_report(tmp_path):
    proc = pipeline("run", "--offload-cpu", "70000", "--cpu-capacities", "1000",
                    "--measured", str(ROOT / "data" / "ttft.jsonl"), "--quiet",
                    "--grid-steps", "3", "--points", "4", *run_outputs(tmp_path))
    assert proc.returncode == 0, proc.stderr
    cpu_cliff = pl.read_parquet(tmp_path / "events" / "cpu_cliff.parquet")
    assert {0, 1000, 56000, 70000} <= set(cpu_cliff["cpu_capacity"].to_list())
    assert "70000-token CPU tier" in (tmp_path / "report" / "index.html").read_text()


def test_other_workload_goes_to_its_own_exports(tmp_path, monkeypatch):
    without_report(monkeypatch)
    proc = pipeline("run", "--docs", "4", "--tokens", "100", "--passes", "fwd,fwd",
                    "--measured", str(ROOT / "data" / "ttft.jsonl"), "--quiet",
                    "--grid-steps", "3", "--points", "4", *run_outputs(tmp_path))
    assert proc.returncode == 0, proc.stderr
    cliff = json.loads((tmp_path / "exports" / "cliff.json").read_text())
    # the marked points come from this workload (working set 400), not the lab's 50110
    assert cliff == {"172": 0, "239": 0, "319": 0, "359": 0, "399": 0, "400": 4}
    params = json.loads((tmp_path / "exports" / "params.json").read_text())
    assert params["docs"] == 4 and params["passes"] == ["fwd", "fwd"]


@pytest.mark.parametrize("args, message", [
    (["--gpu-capacities", "100,-5"], "--gpu-capacities"),
    (["--cpu-capacities", ""], "--cpu-capacities"),
    (["--grid-gpu", "x"], "--grid-gpu"),
    (["--passes", "fwd,up"], "--passes"),
    (["--docs", "-1"], "--docs"),
    (["--points", "0"], "--points"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, args, message):
    proc = pipeline("run", *args, *run_outputs(tmp_path))
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_one_pass_is_refused_and_other_orders_skip_the_cliff_exports(tmp_path, monkeypatch):
    proc = pipeline("run", "--passes", "fwd", *run_outputs(tmp_path))
    assert proc.returncode == 1 and "two passes" in proc.stderr
    assert not list(tmp_path.iterdir())
    without_report(monkeypatch)                 # test_run_honest draws a rev-first report
    proc = pipeline("run", "--passes", "rev,fwd,rev", "--measured",
                    str(ROOT / "data" / "ttft.jsonl"), "--grid-steps", "3", "--points", "4",
                    *run_outputs(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "cliff.json and cpu_cliff.json" in proc.stderr
    exports = sorted(p.name for p in (tmp_path / "exports").iterdir())
    assert "cliff.json" not in exports and "offload.json" in exports
    events = pl.read_parquet(tmp_path / "events" / "gpu_cliff.parquet")
    assert events["pass_order"].cast(pl.String).unique(maintain_order=True).to_list() == [
        "rev", "fwd"]


def test_missing_and_malformed_measured_files(tmp_path):
    proc = pipeline("run", "--measured", str(tmp_path / "nope.jsonl"), *run_outputs(tmp_path))
    assert proc.returncode == 1 and "nope.jsonl" in proc.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 1, '
                   '"ttft_ms": "slow", "total_ms": 1}\n')
    proc = pipeline("run", "--measured", str(bad), *run_outputs(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"error: {bad}:1: ttft_ms must be a number, got 'slow'"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = pipeline("run", "--measured", str(ROOT / "data" / "ttft.jsonl"),
                    "--events-dir", str(blocker / "events"),
                    "--exports-dir", str(tmp_path / "exports"),
                    "--report", str(tmp_path / "index.html"))
    assert proc.returncode == 1
    assert "--events-dir" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_python_dash_m_pipeline_exits_2_on_a_usage_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pipeline", "run", "--points", "0",
                           *run_outputs(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("python -m pipeline run: error: argument --points")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_help_explains_every_option():
    proc = pipeline("run", "--help")
    assert proc.returncode == 0
    for option in ("--docs", "--tokens", "--passes", "--gpu-capacities", "--cpu-capacities",
                   "--cpu-sweep-gpu", "--offload-cpu", "--grid-gpu", "--grid-cpu", "--measured",
                   "--events-dir", "--exports-dir", "--report", "--method"):
        assert option in proc.stdout


def test_the_simulation_method_is_method_not_engine(capsys):
    from pipeline.cli import build_parser
    parser = build_parser()
    assert parser.parse_args(["run"]).method == "onepass"
    assert parser.parse_args(["run", "--method", "direct"]).method == "direct"
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--engine", "direct"])      # "engine" means vLLM & co.
    assert "--engine" in capsys.readouterr().err


def test_readme_first_block_is_the_two_commands_and_ci_runs_the_second():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```")[1].strip().splitlines()
    commands = [line for line in block[1:] if line.strip()]
    assert len(commands) == 2
    assert commands[0].endswith("-m pipeline run")
    assert commands[1] in (ROOT / ".ci" / "run").read_text()


_IMPORTED = ("import contextlib, io, sys\n"
             "from pipeline.cli import COMMANDS, main\n"
             "for argv in eval(sys.argv[1]):\n"
             "    shown = io.StringIO()\n"
             "    with contextlib.redirect_stdout(shown):\n"
             "        try:\n"
             "            main(argv)\n"
             "        except SystemExit:\n"
             "            pass\n"
             "    print(repr((sorted(c.module for c in COMMANDS.values()\n"
             "                       if c.module in sys.modules), shown.getvalue())))\n")


def _commands_imported(*runs):
    """For each argument list of ``runs`` in turn, in one fresh ``python -m pipeline``
    process: the command modules imported so far, and what that run printed."""
    proc = subprocess.run([sys.executable, "-c", _IMPORTED, repr([list(r) for r in runs])],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return [eval(line) for line in proc.stdout.splitlines()]


def test_help_lists_every_command_without_importing_one():
    from pipeline.cli import COMMANDS

    [(imported, shown)] = _commands_imported(["--help"])
    assert imported == []
    for name, command in COMMANDS.items():
        assert name in shown and command.help.split()[0] in shown


def test_a_command_imports_its_own_module_and_shows_its_options():
    # one fresh process: plan's help after trace's adds to a set that is exactly trace's module
    (imported, shown), (after_plan, plan_shown) = _commands_imported(["trace", "--help"],
                                                                     ["plan", "--help"])
    assert imported == ["pipeline.commands.trace"]
    assert "--gpu-model" in shown and "--pattern" in shown
    imported, shown = after_plan, plan_shown                 # plan --fleet: fleet's options
    assert "pipeline.commands.plan" in imported and "pipeline.commands.run" not in imported
    assert "--target-ttft-ms" in shown and "--gpu-model" in shown


def test_every_command_module_offers_the_command_interface():
    from pipeline.cli import COMMANDS, command_module

    for name in COMMANDS:
        module = command_module(name)
        assert callable(module.add_arguments) and callable(module.main), name
