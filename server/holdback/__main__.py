"""`python -m holdback` is the `holdback` command."""

from holdback.cli import main

raise SystemExit(main())
