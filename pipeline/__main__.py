"""`python -m pipeline` is `lakeshare views` (pipeline.cli)."""

import sys

from pipeline.cli import main

sys.exit(main())
