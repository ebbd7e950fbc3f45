"""A toy router registered from this file (one ``register_router`` call, no other edit) is
what ``fleet --router`` and ``plan --fleet --router`` run, in this process and in worker
processes, and what ``--help`` and ``--list-routers`` list."""

from __future__ import annotations

import json

import polars as pl
import pytest

from pipeline.cli import main
from pipeline.fleet.routers import ROUTERS, register_router, unregister_router
from pipeline.fleet.routers.base import Parameter, RouteRequest, Router


class FromTheEnd(Router):
    """``from-the-end``: every request to one instance, counted from the last (a toy)."""

    NAME = "from-the-end"
    PARAMETERS = {"offset": Parameter(0, int, "instances before the last")}
    OBLIVIOUS = True

    def route(self, request: RouteRequest, view) -> tuple[int, str]:
        return self.num_instances - 1 - self.options["offset"], "from-the-end"


@pytest.fixture
def router():
    yield register_router(FromTheEnd)
    unregister_router("from-the-end")


WORKLOAD = ["--pattern", "long-doc-qa", "--num-documents", "3", "--document-length", "600",
            "--model", "qwen2.5-1.5b", "--gpu", "64blocks"]


def test_register_refuses_a_taken_name(router):
    with pytest.raises(ValueError, match="already registered"):
        register_router(FromTheEnd)
    assert list(ROUTERS)[-1] == "from-the-end"


def test_help_and_list_show_the_toy_router(router, capsys):
    for command in (["fleet", "--help"], ["plan", "--help"]):
        with pytest.raises(SystemExit):
            main(command)
        assert "from-the-end" in capsys.readouterr().out
    assert main(["fleet", "--list-routers"]) == 0
    listed = capsys.readouterr().out
    assert "from-the-end: every request to one instance, counted from the last" in listed
    assert "from-the-end.offset=0  instances before the last" in listed


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_fleet_runs_the_toy_router(router, jobs, tmp_path, capsys):
    out = tmp_path / "fleet"
    assert main(["fleet", *WORKLOAD, "--router", "from-the-end,round-robin", "--instances",
                 "3", "--router-option", "from-the-end.offset=1", "--jobs", jobs,
                 "--out", str(out)]) == 0
    capsys.readouterr()
    requests = pl.read_parquet(out / "requests")
    chosen = requests.filter(router="from-the-end")
    assert chosen.height == 9 and set(chosen["instance"]) == {1}
    assert set(chosen["decision"]) == {"from-the-end"}
    assert set(requests.filter(router="round-robin")["instance"]) == {0, 1, 2}


def test_plan_fleet_chooses_among_routers_with_the_toy(router, capsys):
    plan = ["plan", "--fleet", *WORKLOAD, "--instances", "2", "--router",
            "round-robin,from-the-end", "--target-hit-ratio", "0.1", "--json"]
    documents = []
    for jobs in ("1", "2"):
        main([*plan, "--jobs", jobs])
        documents.append(json.loads(capsys.readouterr().out))
    assert documents[0] == documents[1]
    assert documents[0]["grid"]["routers"] == ["round-robin", "from-the-end"]
    assert [a["router"] for a in documents[0]["answers"]] == ["round-robin", "from-the-end"]
