"""kvlab: the exact contract (kvsim, scenario, summarize), standard library only."""
