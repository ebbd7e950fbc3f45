"""A fleet of simulated engine instances behind a router (layer: stages; the command is
``pipeline.commands.fleet``, its page ``pipeline.charts.fleet``)."""
