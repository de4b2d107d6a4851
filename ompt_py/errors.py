"""Exceptions raised by ompt_py; each message says what to do."""

from __future__ import annotations


class OmptPyError(Exception):
    """Base class of ompt_py's errors."""


class ConfigError(OmptPyError, ValueError):
    """An OMPTPY_* environment variable or an option has a value that is not allowed."""


class AttachError(OmptPyError, RuntimeError):
    """The tool cannot observe the OpenMP runtime of this process."""


class TraceFileError(OmptPyError, OSError):
    """A trace file is missing, truncated, corrupt or of an unknown format."""


class MissingEventsError(OmptPyError, ValueError):
    """An analysis needs events that the trace lacks (``missing`` names them)."""

    def __init__(self, message: str, missing: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.missing = missing


class NativeHandlerError(OmptPyError, RuntimeError):
    """A native handler's C source did not compile or does not define its function."""


class TraceWarning(UserWarning):
    """A trace was loaded or written only in part: what was skipped or lost, and why."""


class HandlerWarning(RuntimeWarning):
    """Events for handlers were dropped: the handlers fell behind and their queue was full."""
