"""Test oracles: literal Python ports of engine rules that are no production path any more.
Each is small and readable; the tests prove the compiled engines equal to them."""
