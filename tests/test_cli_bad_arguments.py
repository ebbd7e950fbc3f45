"""``blocks``, ``trace``, ``plan``, ``policies`` and ``fleet`` with bad arguments: one line on
stderr, non-zero exit, nothing written, never a traceback; and a closed stdout (``| head``)
exits quietly (``simulate``: tests/test_simulate_bad_arguments.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, SYNTHETIC_TRACE, needs_shared_trace

from pipeline.sizes.limits import MAX_BLOCK_SIZE, MAX_BLOCKS, MAX_CAPACITY
from pipeline.catalog import POLICIES
from pipeline.cli import main

SYNTHETIC = SYNTHETIC_TRACE
HUGE = str(10 ** 20)                         # beyond int64
SMALL = ["--pattern", "zipf", "--num-documents", "3", "--document-length", "40",
         "--num-requests", "6"]


def one_line_error(capsys, argv, names) -> None:
    """``argv`` fails with one line naming ``names`` (argparse's exit 2 or CLIError's 1)."""
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code
    assert status not in (0, None)
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and err, err
    assert names in err, err


@pytest.mark.parametrize("argv, names", [
    (["--gpu", "-5"], "--gpu"),
    (["--cpu", "-1"], "--cpu"),
    (["--gpu", HUGE], "--gpu"),
    (["--cpu", HUGE, "--cpu-model", "lmcache"], "--cpu"),
    (["--block-size", "0"], "--block-size"),
    (["--block-size", HUGE], "--block-size"),
    (["--block-size", str(MAX_BLOCK_SIZE + 1)], "--block-size"),
    (["--tokens", "99999999999999"], "--tokens"),
    (["--tokens", HUGE, "--docs", "0"], "--tokens"),
    (["--docs", HUGE, "--tokens", "0"], "--docs"),
    (["--gpu-model", "vllm", "--output-tokens", "99999999999999999"], "--output-tokens"),
    (["--cpu-model", "lmcache", "--chunk-size", "100"], "--chunk-size"),
])
def test_blocks_bad_arguments(capsys, argv, names):
    one_line_error(capsys, ["blocks", *argv], names)


def test_blocks_at_the_largest_capacity_runs_every_model_quickly(capsys):
    """2**63 - 1 tokens: clipped for the literal replays (no 2**59-block pool), same answer
    as the fast engines."""
    runs = []
    for gpu_model, cpu_model in (("vllm", "lmcache"), ("vllm-replay", "lmcache-replay"),
                                 ("block-lru", "block-lru"),
                                 ("block-lru-replay", "block-lru-replay")):
        assert main(["blocks", "--gpu", str(MAX_CAPACITY), "--cpu", str(MAX_CAPACITY),
                     "--gpu-model", gpu_model, "--cpu-model", cpu_model, "--docs", "3",
                     "--tokens", "100"]) == 0
        runs.append(json.loads(capsys.readouterr().out)["passes"])
    assert runs[0] == runs[1] and runs[2] == runs[3]
    assert runs[2][1]["gpu_hit_tokens"] == 3 * 96       # infinite GPU: every full block


def trace_error(capsys, tmp_path, argv, names, out=None, report=None) -> None:
    out = out or tmp_path / "out"
    report = report or tmp_path / "r.html"
    before = sorted(tmp_path.rglob("*"))
    one_line_error(capsys, ["trace", *argv, "--out", str(out), "--report", str(report)], names)
    assert sorted(tmp_path.rglob("*")) == before        # nothing written


@pytest.mark.parametrize("argv, names", [
    (["--gpu", "-5"], "--gpu"),
    (["--gpu", HUGE], "--gpu"),
    (["--cpu", f"0,{HUGE}"], "--cpu"),
    (["--cpu-sweep-gpu", HUGE], "--cpu-sweep-gpu"),
    (["--block-size", "0"], "--block-size"),
    (["--block-size", HUGE], "--block-size"),
    (["--shuffle-seed", "-1"], "--shuffle-seed"),
    (["--num-requests", str(MAX_BLOCKS)], "--num-requests"),
    (["--document-length", HUGE], "--pattern zipf"),
    (["--gpu-model", "vllm", "--output-tokens", "99999999999999999"], "--output-tokens"),
])
def test_trace_bad_arguments_on_a_pattern(tmp_path, capsys, argv, names):
    trace_error(capsys, tmp_path, [*SMALL, *argv], names)


def test_trace_empty_file(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for fmt in ("mooncake", "tokens"):
        trace_error(capsys, tmp_path, [str(empty), "--format", fmt], "no requests")


def test_trace_directory_as_path(tmp_path, capsys):
    folder = tmp_path / "folder"
    folder.mkdir()
    trace_error(capsys, tmp_path, [str(folder)], str(folder))


def test_trace_missing_path(tmp_path, capsys):
    trace_error(capsys, tmp_path, [str(tmp_path / "nope.jsonl")], "nope.jsonl")


def test_trace_out_is_a_file_or_lies_under_one(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    trace_error(capsys, tmp_path, SMALL, "--out", out=afile)
    trace_error(capsys, tmp_path, SMALL, "--out", out=afile / "below")
    trace_error(capsys, tmp_path, SMALL, "--report", report=afile / "r.html")


def test_trace_output_names_taken_by_folders(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "points.parquet").mkdir(parents=True)       # written third: would leave two files
    trace_error(capsys, tmp_path, SMALL, "points.parquet", out=out)
    report = tmp_path / "report.html"
    report.mkdir()
    trace_error(capsys, tmp_path, SMALL, "--report", out=tmp_path / "out2", report=report)


def test_trace_unwritable_out(tmp_path, capsys):
    """An --out under a folder without write permission (root ignores permissions: skip)."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        if (locked / "probe").touch() is None:
            (locked / "probe").unlink()
            pytest.skip("running as root: permissions are not enforced")
    except PermissionError:
        trace_error(capsys, tmp_path, SMALL, "--out", out=locked / "out")
    finally:
        locked.chmod(0o755)


def _closed_stdout(*argv: str) -> tuple[int, str]:
    """Run ``python -m pipeline argv`` with its stdout's reader already gone."""
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", *argv], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                                  # like `| head` that has quit
    err = proc.stderr.read().decode()
    proc.stderr.close()
    return proc.wait(timeout=120), err


def test_piping_into_a_closed_reader_is_no_traceback():
    status, err = _closed_stdout("blocks", "--docs", "2", "--tokens", "64")
    assert status == 1 and err == ""


# --- usage errors: argparse's one line and exit 2, one bound per option -------------------

def usage_error(capsys, argv, message) -> None:
    """``argv`` is a usage error (argparse's, or a ``UsageError`` after parsing): exit 2, one
    line holding ``message``."""
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    assert "\n" not in err and message in err, err


@pytest.mark.parametrize("argv, message", [
    # a value with a minus sign and a digit is a value, refused by its type (not "expected
    # one argument")
    (["trace", str(SYNTHETIC), "--gpu", "-1GiB"], "--gpu: a capacity must be >= 0"),
    (["trace", *SMALL, "--cpu", "-1e3"], "--cpu: a capacity must be >= 0"),
    (["trace", *SMALL, "--cpu-sweep-gpu", "-.5GiB"], "--cpu-sweep-gpu: a capacity must be >= 0"),
    (["blocks", "--gpu", "-1GiB"], "--gpu: a capacity must be >= 0"),
    (["blocks", "--cpu", "-2GB"], "--cpu: a capacity must be >= 0"),
    (["plan", "--target-hit-ratio", "0.5", "--gpu", "-1GiB"], "--gpu: a capacity must be >= 0"),
    (["policies", "--capacities", "-1GiB"], ">= 0"),
    # one bound per option, whatever the refused value
    (["run", "--docs", "-1"], "--docs: expected an integer >= 1, got '-1'"),
    (["run", "--docs", "0"], "--docs: expected an integer >= 1, got '0'"),
    (["run", "--tokens", "-7"], "--tokens: expected an integer >= 1"),
    (["plan", "--target-hit-ratio", "0.5", "--docs", "0"], "--docs: expected an integer >= 1"),
    (["plan", "--target-hit-ratio", "0.5", "--docs", "-1"], "--docs: expected an integer >= 1"),
    (["plan", "--target-hit-ratio", "0.5", "--tokens", "0"], "--tokens: expected an integer >= 1"),
    (["plan", "--target-hit-ratio", "0.5", "--pass", "first"], "--pass: expected warm, all"),
    (["plan", "--target-hit-ratio", "0.5", "--pass", "0,2"], "--pass: expected warm, all"),
    (["policies", "--docs", "0"], "--docs: expected an integer >= 1"),
    (["policies", "--docs", "-1"], "--docs: expected an integer >= 1"),
    (["measure", "--local-engine", "--docs", "1000"], "--docs: expected at most 999 documents"),
    (["measure", "--local-engine", "--docs", "0"], "--docs: expected an integer >= 1"),
    (["run", "--points", "-1"], "--points: expected an integer >= 1"),
    (["blocks", "--block-size", "-16"], "--block-size: expected an integer >= 1"),
    (["blocks", "--kv-bytes-per-token", "0"], "--kv-bytes-per-token: expected an integer >= 1"),
    (["plan", "--target-hit-ratio", "0.5", "--kv-bytes-per-token", "-3"],
     "--kv-bytes-per-token: expected an integer >= 1"),
    # a hit ratio outside (0, 1] is a usage error, above 1 as at 0
    (["plan", "--target-hit-ratio", "1.5"], "--target-hit-ratio: expected a number in (0, 1]"),
    (["plan", "--target-hit-ratio", "0"], "--target-hit-ratio: expected a number in (0, 1]"),
    (["plan", "--target-hit-ratio", "-0.5"], "--target-hit-ratio: expected a number in (0, 1]"),
    (["plan", "--target-hit-ratio", "nan"], "--target-hit-ratio: expected a finite number"),
])
def test_usage_errors_exit_2_with_the_options_bound(capsys, argv, message):
    usage_error(capsys, argv, message)


# --- trace files: a BOM is no error, a huge id is not "non-integer" -----------------------

MOONCAKE_LINES = [
    '{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}',
    '{"timestamp": 5, "input_length": 1536, "output_length": 1, "hash_ids": [1, 2, 3]}',
]


def test_a_trace_starting_with_a_utf8_bom_reads_as_without(tmp_path, capsys):
    plain, bom = tmp_path / "plain.jsonl", tmp_path / "bom.jsonl"
    plain.write_bytes(("\n".join(MOONCAKE_LINES) + "\n").encode())
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    runs = []
    for path in (plain, bom):
        assert main(["trace", str(path), "--out", str(tmp_path / path.stem), "--no-report",
                     "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        runs.append((summary["requests"], summary["points"]))
    assert runs[0] == runs[1] and runs[0][0] == 2


def test_a_hash_id_beyond_int64_is_named_as_such(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(MOONCAKE_LINES[0] + "\n" + MOONCAKE_LINES[1].replace("3]", f"{2**70}]")
                     + "\n")
    trace_error(capsys, tmp_path, [str(trace)],
                f"{trace}:2: hash_ids holds {2**70}, beyond the 64-bit integer range")
    trace.write_text(MOONCAKE_LINES[0].replace('"input_length": 1024', f'"input_length": {2**70}')
                     + "\n")
    trace_error(capsys, tmp_path, [str(trace)],
                f"{trace}:1: input_length {2**70} is beyond the 64-bit integer range")


# --- size guards outside block mode: one line naming the arguments, before allocating ----

@pytest.mark.parametrize("argv, names", [
    (["run", "--points", "1000000000"], "--points 1000000000"),
    (["run", "--grid-steps", "100000"], "--grid-steps 100000"),
    (["run", "--docs", "10000000"], "--docs 10000000 x 3 --passes"),
    (["run", "--docs", "1000000000", "--tokens", "1000000000"], "--docs 1000000000"),
    (["run", "--gpu-capacities", ",".join(map(str, range(70000)))], "--gpu-capacities"),
    (["plan", "--target-hit-ratio", "0.5", "--docs", "10000000"], "--docs 10000000 x 3 --passes"),
    (["plan", "--target-hit-ratio", "0.5", "--docs", "1000000000", "--tokens", "1000000000"],
     "--docs 1000000000 x 3 --passes"),
    (["plan", "--target-hit-ratio", "0.5", "--docs", "1000000", "--tokens", "100000",
      "--block-size", "1"], "--block-size 1"),
    (["plan", "--target-hit-ratio", "0.5", "--block-size", "16", "--gpu-model", "vllm",
      "--output-tokens", "99999999999999999"], "--output-tokens"),
    (["policies", "--docs", "10000000"], "--docs 10000000 x 3 --passes x 6 --capacities"),
    (["policies", "--docs", "1000000", "--capacities", "1,2,3"],
     f"x 3 --capacities x {len(POLICIES)} --gpu-policy"),          # every registered policy
])
def test_work_beyond_the_limits_is_refused_before_allocating(tmp_path, capsys, argv, names):
    from conftest import folder_snapshot, run_outputs

    extra = {"run": run_outputs(tmp_path), "policies": ["--out", str(tmp_path / "p")]}.get(
        argv[0], [])
    one_line_error(capsys, [*argv, *extra], names)
    assert folder_snapshot(tmp_path) == {}


FLEET_WORKLOAD = ["--pattern", "groups", "--groups", "2", "--users", "2", "--questions", "1",
                  "--system-prompt-length", "64", "--question-length", "16",
                  "--output-tokens", "2", "--model", "qwen2.5-1.5b", "--jobs", "1"]
FLEET_ERRORS = [       # (argv after the workload, exit status, what the one line names)
    (["--router", "bogus"], 2, "argument --router: unknown router 'bogus'"),
    (["--instances", "0"], 2, "argument --instances: instance counts must be >= 1"),
    (["--router", "round-robin", "--router-option", "kv-cost.temperature=1"], 2,
     "error: --router-option 'kv-cost.temperature=1': router kv-cost is not among --router "
     "round-robin"),
    (["--router", "kv-cost", "--router-option", "kv-cost.heat=1"], 2,
     "error: --router-option 'kv-cost.heat=1': router kv-cost has no option 'heat'"),
    (["--router", "least-loaded", "--router-option", "least-loaded.metric=x"], 2,
     "error: --router-option 'least-loaded.metric=x': bad value 'x'"),
    (["--router", "kv-cost", "--router-option", "temperature"], 2,
     "error: --router-option 'temperature': expected ROUTER.OPTION=VALUE"),
    (["--executor", "ray", "--ray-address", "nowhere"], 2,
     "error: --ray-address nowhere: expected HOST:PORT"),
    (["--executor", "ray", "--ray-address", "127.0.0.1:9"], 1,
     "--ray-address 127.0.0.1:9: no Ray cluster answers"),
]


def _status(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize("argv, status, names", FLEET_ERRORS)
def test_fleet_bad_input_is_one_line_usage_2_and_writes_nothing(tmp_path, capsys, argv,
                                                                 status, names):
    from conftest import folder_snapshot

    (tmp_path / "keep").write_text("x")
    before = folder_snapshot(tmp_path)
    code = _status(["fleet", *FLEET_WORKLOAD, "--out", str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == status and names in err and "\n" not in err and "Traceback" not in err
    if status == 2:
        assert err.startswith("python -m pipeline fleet: error: "), err
    assert folder_snapshot(tmp_path) == before


@pytest.mark.parametrize("argv, status, names", FLEET_ERRORS)
def test_plan_fleet_bad_input_is_one_line_usage_2_and_writes_nothing(tmp_path, capsys, argv,
                                                                      status, names):
    from conftest import folder_snapshot

    (tmp_path / "keep").write_text("x")
    before = folder_snapshot(tmp_path)
    argv = [*argv, "--instances", "2"] if "--instances" not in argv else argv
    code = _status(["plan", *FLEET_WORKLOAD, "--fleet", "--target-hit-ratio", "0.5",
                    "--out", str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == status and names in err and "\n" not in err and "Traceback" not in err
    if status == 2:
        assert err.startswith("python -m pipeline plan: error: "), err
    assert folder_snapshot(tmp_path) == before


def test_fleet_dead_ray_address_keeps_the_finished_points(tmp_path, capsys):
    """A sweep, then ``--resume`` on a Ray address where nothing answers: one line, exit
    1, and the folder exactly as the first run left it."""
    from conftest import folder_snapshot

    out = tmp_path / "out"
    assert _status(["fleet", *FLEET_WORKLOAD, "--out", str(out)]) == 0
    capsys.readouterr()
    before = folder_snapshot(out)
    code = _status(["fleet", *FLEET_WORKLOAD, "--out", str(out), "--resume", "--executor",
                    "ray", "--ray-address", "127.0.0.1:9"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and "no Ray cluster answers" in err and "\n" not in err
    assert folder_snapshot(out) == before


# --- a pattern option the workload does not read is refused, not ignored -----------------

@pytest.mark.parametrize("argv, message", [
    (["trace", "--pattern", "long-doc-qa", "--num-requests", "5"],
     "--num-requests: --pattern long-doc-qa does not use it (it takes --num-documents"),
    (["trace", "--pattern", "zipf", "--repeat-count", "3"],
     "--repeat-count: --pattern zipf does not use it"),
    (["trace", "--pattern", "multi-tenant", "--zipf-alpha", "2"],
     "--zipf-alpha: --pattern multi-tenant does not use it"),
    (["plan", "--target-hit-ratio", "0.5", "--pattern", "zipf", "--users", "3"],
     "--users: --pattern zipf does not use it"),
    (["fleet", "--pattern", "groups", "--num-documents", "3", "--instances", "2"],
     "--num-documents: --pattern groups does not use it"),
    (["fleet", "--pattern", "multi-turn", "--questions", "3", "--instances", "2"],
     "--questions: --pattern multi-turn does not use it"),
])
def test_an_unused_pattern_option_is_a_usage_error(capsys, tmp_path, argv, message):
    usage_error(capsys, [*argv, "--gpu", "64blocks"] if argv[0] == "trace" else argv, message)


@needs_shared_trace
def test_a_pattern_option_with_a_trace_file_is_refused(capsys, tmp_path):
    out = tmp_path / "out"
    usage_error(capsys, ["simulate", str(SYNTHETIC), "--format", "mooncake", "--gpu", "64blocks",
                         "--question-length", "8", "--out", str(out)],
                "--question-length: a --pattern option; a trace file sets its own requests")
    assert not out.exists()
    usage_error(capsys, ["trace", str(SYNTHETIC), "--gpu", "64blocks", "--document-length", "9"],
                "--document-length: a --pattern option")


def test_the_options_a_pattern_reads_and_the_seed_still_run(tmp_path):
    for argv in (["trace", "--pattern", "zipf", "--num-requests", "6", "--zipf-alpha", "1.2"],
                 ["trace", "--pattern", "long-doc-qa", "--repeat-mode", "tile",
                  "--repeat-count", "1"],
                 ["trace", "--pattern", "multi-tenant", "--users", "2", "--shuffle-seed", "3"]):
        assert main([*argv, "--num-documents", "2", "--document-length", "64",
                     "--gpu", "64blocks", "--out", str(tmp_path / argv[2])]) == 0


# --- a trace in another format than --format says: the error says which to give -----------

MOONCAKE_LINE = '{"timestamp": 0, "input_length": 40, "output_length": 2, "hash_ids": [1, 2]}\n'


@pytest.mark.parametrize("command, line, hint", [
    (["simulate", "--gpu", "64blocks"], MOONCAKE_LINE, "give --format mooncake"),
    (["fleet", "--instances", "1", "--gpu", "64blocks", "--model", "qwen2.5-1.5b"],
     '{"prompt_token_ids": [1, 2, 3]}\n', "give --format tokens"),
    (["trace", "--gpu", "64blocks"], '{"timestamp": 0, "tokens": [1, 2, 3]}\n',
     "give --format tokens"),
    (["plan", "--target-hit-ratio", "0.5"], '{"prompt_token_ids": [1, 2, 3]}\n', None),
])
def test_a_trace_in_the_other_format_names_the_format(capsys, tmp_path, command, line, hint):
    """The first line's fields name the format (Mooncake's hash_ids, the command's own token
    field): the error ends with the --format to give; a field another command reads
    (plan's token lines are {timestamp, tokens}) gives no wrong hint."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(line * 3)
    out = tmp_path / "out"
    status = main([command[0], str(trace), *command[1:],
                   *(["--out", str(out)] if command[0] in ("simulate", "fleet") else [])])
    err = capsys.readouterr().err.strip()
    assert status == 1 and "\n" not in err and "missing field" in err, err
    assert (hint in err) if hint else ("--format" not in err), err
    assert not out.exists()
