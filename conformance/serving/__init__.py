"""Serving checks: the streaming speech API and the OpenAI-compatible HTTP server."""
