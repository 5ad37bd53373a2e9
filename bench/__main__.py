"""``python -m bench [NAME...] [--quick] [--json] [--list]``, from the repository root."""

from bench._cli import main

raise SystemExit(main())
