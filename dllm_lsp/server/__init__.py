"""The pygls language server (see app.py for the handler table)."""
from .app import DllmLanguageServer, create_server

__all__ = ["DllmLanguageServer", "create_server"]
