"""Test oracles: literal Python ports of engine code, read beside the engine's source and
held equal to the compiled production models by the tests (never imported by pipeline/)."""
