"""Who may use a TCP server: loopback by default, a shared token for anything wider.

- `dllm-lsp serve --tcp HOST:PORT` refuses to bind a host that is not a loopback address
  unless a token is configured (`--token-file FILE`, or the DLLM_LSP_TOKEN environment variable).
- With a token configured (on any host), a connection's first message must be `initialize`
  carrying `initializationOptions.token` equal to it. Anything else is answered with an error
  and the connection is closed, before any document is read.

The token is a shared secret sent in clear text: on an untrusted network, put the server
behind an SSH tunnel or a TLS proxy (docs/deploy.md).
"""
from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import socket
from pathlib import Path
from typing import Any

from lsprotocol import types

log = logging.getLogger(__name__)

TOKEN_ENV = "DLLM_LSP_TOKEN"
AUTH_FAILED = -32001          # server-defined JSON-RPC error: the token is missing or wrong
SERVER_NOT_INITIALIZED = -32002


class AuthError(Exception):
    """The server cannot start as asked (the message says why, in one line)."""


# A token listened for beyond this machine must resist guessing: wrong tokens are not throttled
# (a refused connection is closed, and a peer may open another at once), so its length is the
# defence. 16 characters of `openssl rand -hex 32` are 64 bits.
MIN_TOKEN_CHARS = 16


def load_token(token_file: str | None, environ: dict[str, str] | None = None) -> str | None:
    """The configured token: the file's first line, else $DLLM_LSP_TOKEN, else None."""
    environ = os.environ if environ is None else environ
    if token_file:
        path = Path(token_file).expanduser()
        try:
            # the first line: a longer base64 token wraps at 76 characters, and the editors send
            # the first line (the docs' Neovim example); the whole file refused every client
            token = (path.read_text(encoding="utf-8").splitlines() or [""])[0].strip()
        except OSError as exc:
            raise AuthError(f"cannot read the token file {path}: {exc.strerror or exc}") from None
        if not token:
            raise AuthError(f"the token file {path} is empty")
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            log.warning("the token file %s is readable by other users of this machine (mode %o): "
                        "chmod 600 it", path, mode)
        return token
    token = environ.get(TOKEN_ENV, "").strip()
    return token or None


def is_loopback(host: str) -> bool:
    """True when every address `host` names is a loopback address (127.0.0.0/8, ::1, localhost)."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen beyond this machine without a token."""
    if is_loopback(host):
        return
    if token is None:
        raise AuthError(f"refusing to listen on {host!r} without a token: anyone who can reach it could use "
                        f"the server. Configure one with --token-file FILE or {TOKEN_ENV} (docs/deploy.md), "
                        "or bind 127.0.0.1 and tunnel")
    if len(token) < MIN_TOKEN_CHARS:
        raise AuthError(f"refusing to listen on {host!r} with a token of {len(token)} characters: it could be "
                        f"guessed; use at least {MIN_TOKEN_CHARS} (`openssl rand -hex 32` makes one)")


def token_matches(expected: str, offered: Any) -> bool:
    return isinstance(offered, str) and hmac.compare_digest(offered.encode("utf-8"), expected.encode("utf-8"))


def screen(data: dict, token: str) -> tuple[bool, dict | None]:
    """The check of a TCP connection's first message on its raw JSON, before a language server is
    built for the connection (tcp.screen_first): (admitted, the error answer to send, if any).
    Admitted only for an `initialize` whose `initializationOptions.token` is right; the language
    server then checks it again with `admit` (and removes it). Refusals are answered as `admit`
    answers them (docs/deploy.md's table)."""
    method = data.get("method")
    msg_id = data.get("id")
    if method == types.INITIALIZE and "id" in data:
        params = data.get("params")
        options = params.get("initializationOptions") if isinstance(params, dict) else None
        offered = options.get("token") if isinstance(options, dict) else None
        if token_matches(token, offered):
            return True, None
        reason = "initializationOptions.token is missing" if offered is None else "initializationOptions.token is wrong"
        log.warning("refused a connection: %s", reason)
        return False, {"jsonrpc": "2.0", "id": msg_id,
                       "error": {"code": AUTH_FAILED, "message": f"dllm-lsp: {reason} (docs/deploy.md)"}}
    log.warning("refused a connection: %s before initialize", method or "a response")
    if method is not None and "id" in data:
        return False, {"jsonrpc": "2.0", "id": msg_id, "error": {
            "code": SERVER_NOT_INITIALIZED, "message": "dllm-lsp: initialize with initializationOptions.token first"}}
    return False, None


def admit(protocol, message) -> bool:
    """Called for every message of a connection that has not authenticated yet. True lets it through
    (a correct `initialize`, whose token is then removed from the options); otherwise the client is
    answered (requests) and the connection closed."""
    method = getattr(message, "method", None)
    msg_id = getattr(message, "id", None)
    if method == types.INITIALIZE:
        options = message.params.initialization_options
        offered = options.get("token") if isinstance(options, dict) else None
        if token_matches(protocol.token, offered):
            options.pop("token", None)
            protocol.authenticated = True
            return True
        reason = "initializationOptions.token is missing" if offered is None else "initializationOptions.token is wrong"
        log.warning("refused a connection: %s", reason)
        protocol._send_data({"jsonrpc": "2.0", "id": msg_id,
                             "error": {"code": AUTH_FAILED, "message": f"dllm-lsp: {reason} (docs/deploy.md)"}})
    elif method == types.EXIT:
        return True
    else:
        log.warning("refused a connection: %s before initialize", method or "a response")
        if msg_id is not None and method is not None:
            protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {
                "code": SERVER_NOT_INITIALIZED, "message": "dllm-lsp: initialize with initializationOptions.token first"}})
    protocol.close_connection()
    return False
