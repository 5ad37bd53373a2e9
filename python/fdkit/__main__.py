"""`python -m fdkit` runs the `fdkit` command."""

import sys

from fdkit.cli import main

sys.exit(main())
