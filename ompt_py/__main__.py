"""`python -m ompt_py` is `ompt-py`."""

from .presentation.cli import entry

entry()
