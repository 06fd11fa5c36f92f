"""One GPU sitting from a plan: `python -m conformance.sitting PLAN.yaml` (docs/sitting.md)."""
