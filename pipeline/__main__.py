"""``python -m pipeline``: see pipeline/cli.py."""

from pipeline.cli import main

raise SystemExit(main())
