"""A fleet of simulated engine instances behind a router (``python -m pipeline fleet``)."""
