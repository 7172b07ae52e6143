"""`dllm-lsp serve --tcp`: many clients over time (and at once), one model.

pygls' own TCP mode serves a single connection and exits the process when it closes (and its
`exit` handler calls sys.exit). Here every connection gets its own language server (documents,
settings, pending requests) while all of them share one ModelHost, so a team shares one GPU.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from lsprotocol import types
from pygls.io_ import run_async
from pygls.protocol.language_server import lsp_method

from .app import create_server
from .model_host import ModelHost
from .protocol import DllmProtocol
from .settings import ServerSettings

log = logging.getLogger(__name__)


class ConnectionProtocol(DllmProtocol):
    """One client's protocol: `exit` ends this connection, not the process."""

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any):
        if self.writer is not None:
            self.writer.close()
        if self._server._stop_event is not None:
            self._server._stop_event.set()
        yield from ()


async def serve_tcp(host: str, port: int, settings: ServerSettings) -> None:
    shared = ModelHost()

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        log.info("client connected from %s", peer)
        server = create_server(settings, host=shared, protocol_cls=ConnectionProtocol)
        server._stop_event = threading.Event()
        server.protocol.set_writer(writer)
        try:
            await run_async(stop_event=server._stop_event, reader=reader, protocol=server.protocol,
                            logger=log, error_handler=server.report_server_error)
        finally:
            if not writer.is_closing():
                writer.close()
            log.info("client %s disconnected", peer)

    listener = await asyncio.start_server(on_connection, host, port)
    log.info("listening on %s", ", ".join(str(s.getsockname()) for s in listener.sockets))
    async with listener:
        await listener.serve_forever()
