"""The two error families every layer speaks: transient (retry) and permanent (fail fast).

Provider SDK exceptions never travel past a connector; they become one of these, carrying
the provider's own error code so the one-line message a user sees names it.
"""

from __future__ import annotations

import signal


class FerryError(Exception):
    """Base of every error ferry raises on purpose."""


class UsageError(FerryError):
    """Bad input from the user: a URL, a profiles file, a flag. The CLI exits 2."""


class TransientError(FerryError):
    """Worth retrying: throttling, 5xx, connection resets, timeouts."""

    def __init__(self, message: str, *, code: str = "", retry_after: float | None = None):
        super().__init__(message)
        self.code = code
        self.retry_after = retry_after


class PermanentError(FerryError):
    """Retrying cannot help: denied, not found, bad request, bad credentials."""

    def __init__(self, message: str, *, code: str = ""):
        super().__init__(message)
        self.code = code


class NotFoundError(PermanentError):
    """The object, bucket or container does not exist."""


class ChecksumMismatch(FerryError):
    """What the target holds is not what was sent. The engine re-copies once, then fails."""


class GateFailed(FerryError):
    """A validation gate measured a FAIL."""


class RejectedKey(PermanentError):
    """A source key the target cannot hold safely (it would escape a local directory). Exit 2."""


class Interrupted(FerryError):
    """Ctrl-C, SIGTERM or a cancel from the Prefect UI stopped the work: not a failure, nothing is rolled back.

    Every verified object and part stays in the transfer state; running the same command resumes.
    """

    def __init__(self, signum: int, then: str = "what was verified is kept: run the same command again to resume"):
        self.signum = signum
        # What the operator does next, for the last line.
        self.then = then
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        """The shell's code for a process ended by the signal: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


class RollbackInterrupted(Interrupted):
    """An interrupt stopped a rollback between two items; what it undid is journalled, the next one finishes it."""


class StepFailed(FerryError):
    """A phase's step failed after its last retry: the one failure that rolls a phase back (with a gate's FAIL).

    It carries the step's own error, which is what the user is told.
    """

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error
