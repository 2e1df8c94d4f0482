"""The CLI's one error type: printed as a single line (plus any log tail), exit 1."""


class CLIError(Exception):
    """A user-facing failure; the message says what went wrong and what to do."""
