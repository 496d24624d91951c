"""`python -m spex.cli` is the `spex` command."""

from spex.cli.main import main

raise SystemExit(main())
