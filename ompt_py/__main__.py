"""`python -m ompt_py` is `ompt-py`."""

import sys

from .presentation.cli import main

sys.exit(main())
