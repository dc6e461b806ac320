"""`python -m fusetrace`: the command line, as the background server is started."""

import sys

from .cli import main

sys.exit(main())
