"""``python -m fdkit.benchmarks [NAME...] [--quick] [--json]``."""

from fdkit.benchmarks._cli import main

raise SystemExit(main())
