"""The server's options are declared once, in dllm_lsp.options; this name stays for the TCP
front (server/tcp.py), which passes a connection's starting options as `ServerSettings`."""
from dllm_lsp.options import Options as ServerSettings
from dllm_lsp.options import SettingsError

__all__ = ["ServerSettings", "SettingsError"]
