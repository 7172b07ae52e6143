"""Handlers for the multi-site features (fill holes, next edits, companion edits).

Registered by app.create_server through `register`; the logic lives in dllm_lsp.multisite.
"""
from __future__ import annotations


def register(server) -> None:
    """Add the multi-site handlers to `server` (none yet)."""
