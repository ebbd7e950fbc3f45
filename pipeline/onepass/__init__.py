"""The one-pass engines: every capacity of a cache in one exact pass (stack distances)."""
