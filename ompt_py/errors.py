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
