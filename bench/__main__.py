"""``python -m bench [NAME...] [--quick | --tour] [--json] [--list] [--contended] [-q]``, from
the repository root."""

from bench._cli import main

raise SystemExit(main())
