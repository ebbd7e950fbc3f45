"""The ``run`` command: every stage, with its block mode and its JSON exports."""
