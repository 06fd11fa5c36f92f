"""Planted defects the suite must catch (`python -m conformance.mutations`, tox -e mutations;
docs/mutations.md): one module per area with its table, run.py the runner they share."""
