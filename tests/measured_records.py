"""Records of the measured file for the tests, and an equality that treats NaN as equal."""

import math


def record(config, name, doc, ttft, total=1.0):
    return {"config": config, "pass": name, "doc": doc, "doc_tokens": 4864, "ttft_ms": ttft,
            "total_ms": total}


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def assert_same(got, want, where="summary"):
    """==, but NaN equals NaN; also the same types and the same key order."""
    assert type(got) is type(want), (where, got, want)
    if isinstance(want, dict):
        assert list(got) == list(want), where
        for key in want:
            assert_same(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, float) and math.isnan(want):
        assert math.isnan(got), (where, got, want)
    else:
        assert got == want, (where, got, want)
