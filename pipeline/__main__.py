"""``python -m pipeline``: see pipeline/cli.py (Ctrl-C from the first import: pipeline.entry)."""

from pipeline.cli import main

raise SystemExit(main())
