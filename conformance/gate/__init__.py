"""The upgrade gate: the suite on a chosen vLLM, a verdict, and its diff against the pinned one
(`python -m conformance.gate`, tox -e gate; docs/gate.md). __main__.py the command, run.py the run
in the candidate's environment, watch.py its per-check limit and deadline, diff.py the comparison of
two verdicts, speed.py the GPU speed figures."""
