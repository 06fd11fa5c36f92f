"""`python -m reference.deploy`: the resolved configuration of a deploy file (reference/deploy/cli.py)."""

from reference.deploy.cli import main

raise SystemExit(main())
