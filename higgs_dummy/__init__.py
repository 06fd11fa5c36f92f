"""Dummy Higgs Audio v3 checkpoints in the real format, made by code from a seed (`python -m higgs_dummy`)."""
