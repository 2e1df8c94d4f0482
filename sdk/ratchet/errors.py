"""Exceptions a handler raises to steer its retries, and the SDK's own errors.

A handler that returns succeeds. One that raises fails its attempt:
`RetryableError` (or any other exception) is retried with backoff until the
task's attempts are spent; `FatalError` fails the task at once.
"""

from __future__ import annotations

from ratchet.libs.durations import parse_duration


class RetryableError(Exception):
    """The attempt failed but a later one may succeed.

    `retry_after` (a duration such as "30s", or seconds) replaces the computed
    backoff before the next attempt, e.g. to honour a downstream Retry-After.
    """

    def __init__(self, message: str = "", retry_after: str | int | float | None = None):
        super().__init__(message)
        self.message = message
        self.retry_after_s = None if retry_after is None else parse_duration(retry_after)


class FatalError(Exception):
    """The task can never succeed (bad payload, a 4xx from a downstream):
    fail it now instead of spending its remaining attempts."""

    def __init__(self, message: str = ""):
        super().__init__(message)
        self.message = message


class ResultNotSerializable(FatalError):
    """The handler returned a value that is not JSON (a set, an object, NaN...)."""


class ResultTooLarge(FatalError):
    """The handler's JSON result is larger than the 256 KiB inline limit."""


class CheckpointNotSerializable(FatalError):
    """ctx.checkpoint() was given a value that is not JSON."""


class CheckpointTooLarge(FatalError):
    """ctx.checkpoint() was given a value over the 64 KiB limit once encoded as JSON."""


class TaskDefinitionError(ValueError):
    """A `@task` declaration is invalid; the message says which argument and how to fix it."""


class DiscoveryError(Exception):
    """An app folder could not be loaded: import error, no handlers, or duplicate names."""
