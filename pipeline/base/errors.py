"""The one user-error type of the pipeline's commands."""


class CLIError(Exception):
    """A user error: the CLI prints it as one line on stderr and exits with status 1."""
