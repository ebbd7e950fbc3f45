"""Every reader of the fitted step-time JSON refuses a bad file with the same one line."""

import json

import pytest

from pipeline.base.errors import CLIError
from pipeline.fit.per_request import fitted_requests
from pipeline.steptime import load_latency
from pipeline.steptime.registry import step_time_model

GOOD = {"kind": "fitted-step-time", "version": 1, "served_model": "m",
        "kv_bytes_per_token": 2048,
        "coefficients": {"fixed_ms": 3.0, "prefill_token_ms": 0.02, "context_token_ms": 0.0,
                         "decode_seq_ms": 0.1, "reload_token_ms": 0.004},
        "unidentified": [], "prompt_tokens_range": [10, 4000],
        "engine_model": {"max_num_batched_tokens": 512}, "source": []}


def latency_option(path):
    """--latency FILE of every command (simulate, fleet, plan): its message less the option."""
    try:
        return step_time_model(str(path), None)
    except CLIError as exc:
        raise ValueError(str(exc).removeprefix("--latency: ")) from None


READERS = (load_latency, latency_option, fitted_requests)


def _coefficients(**changes):
    return {"coefficients": {**GOOD["coefficients"], **changes}}


@pytest.mark.parametrize("changes, field", [
    ({"kind": "other"}, "not a fitted step-time file"),
    ({"version": 2}, "version 2"),
    ({"coefficients": {"fixed_ms": 1.0}}, "lacks prefill_token_ms"),
    (_coefficients(fixed_ms=-1.0), "coefficients.fixed_ms"),
    (_coefficients(decode_seq_ms=None), "coefficients.decode_seq_ms"),
    (_coefficients(bogus_ms=1.0), "coefficients.bogus_ms"),
    ({"unidentified": "x"}, "unidentified"),
    ({"prompt_tokens_range": None}, "prompt_tokens_range"),
    ({"kv_bytes_per_token": 0}, "kv_bytes_per_token"),
    ({"engine_model": {"max_num_batched_tokens": 0}}, "max_num_batched_tokens"),
    ({"machine_load": {"per_load_average": -2}}, "per_load_average"),
])
def test_every_reader_gives_one_line_naming_file_and_field(tmp_path, changes, field):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**GOOD, **changes}))
    messages = set()
    for reader in READERS:
        with pytest.raises(ValueError) as info:
            reader(path)
        messages.add(str(info.value))
    assert len(messages) == 1
    message = messages.pop()
    assert message.startswith(f"{path}: ") and field in message and "\n" not in message


def test_an_unidentified_null_coefficient_is_zero_for_every_reader(tmp_path):
    path = tmp_path / "fit.json"
    path.write_text(json.dumps({**GOOD, **_coefficients(reload_token_ms=None),
                                "unidentified": ["reload_token_ms"]}))
    assert load_latency(path).coefficients["reload_token_ms"] == 0.0
    assert latency_option(path).coefficients["reload_token_ms"] == 0.0
