"""``python -m tests.peer_suites``: see the package docstring; ``--help`` for the options."""

from __future__ import annotations

import sys

from ._cli import main

sys.exit(main())
