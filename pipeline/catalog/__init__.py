"""The catalog of cache models: every package's registry entries, collected in one place."""
