"""Codec checks: the decode against the oracle's goldens, streamed against offline decode."""
