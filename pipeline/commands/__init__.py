"""The commands (layer: commands): one module per ``python -m pipeline`` command, named in
``pipeline.cli.COMMANDS``, parsing its options and calling the stages; ``run_blocks`` and
``run_exports`` are the ``run`` command's block mode and JSON exports, ``simulate_time`` the
step-time options and outputs of ``simulate``, ``trace_outputs`` the files ``trace`` writes."""
