"""`python -m ompt_py` is `ompt-py`."""

import sys

from .cli import main

sys.exit(main())
