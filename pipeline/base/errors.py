"""The user-error types of the pipeline's commands."""


class CLIError(Exception):
    """A user error in the data or the environment: the CLI prints it as one line on stderr
    and exits with status 1."""

    status = 1


class UsageError(CLIError):
    """A usage error found after parsing (options that contradict each other or the chosen
    model): one line on stderr, exit status 2, as argparse's own errors."""

    status = 2
