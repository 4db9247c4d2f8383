"""How the server meets its clients: MCP on standard input and output, or the Streamable HTTP
transport at ``/mcp`` behind the guard (``guard.py``).

Both serve until the client goes away (standard input closed) or ``stop`` is set (a signal).
"""

from __future__ import annotations

import os
import socket
from typing import Any

import trio


class _Lines:
    """Standard input as lines of text, read from a private copy of its descriptor with trio, so
    a stop never waits on a blocked read (standard input itself then reads the null device, as
    the SDK's own transport leaves it, so a tool never eats the protocol's bytes)."""

    def __init__(self) -> None:
        wire = os.dup(0)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        self._stream = trio.lowlevel.FdStream(wire)

    def __aiter__(self) -> Any:
        return self._lines()

    async def _lines(self) -> Any:
        pending = b""
        while True:
            chunk = await self._stream.receive_some(65536)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    yield line.decode("utf-8", "replace")
        if pending.strip():
            yield pending.decode("utf-8", "replace")

    async def aclose(self) -> None:
        await self._stream.aclose()


async def serve_stdio(server: Any, stop: trio.Event) -> None:
    """MCP on standard input and output until the client closes standard input or ``stop`` is
    set. While it serves, standard output carries the protocol only (file descriptor 1 points at
    standard error, so a tool that prints cannot corrupt it)."""
    import anyio
    from mcp.server.stdio import stdio_server

    lines = _Lines()
    try:
        async with stdio_server(stdin=lines) as (read, write):  # type: ignore[arg-type]
            async with trio.open_nursery() as nursery:

                async def until_stopped() -> None:
                    await stop.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(until_stopped)
                await server.run(read, write, server.create_initialization_options())
                nursery.cancel_scope.cancel()
    except anyio.ClosedResourceError:
        pass
    finally:
        await lines.aclose()


async def serve_http(server: Any, stop: trio.Event, *, sock: socket.socket, guard: Any) -> None:
    """The Streamable HTTP transport at ``/mcp`` on ``sock`` (bound by the caller), every request
    through ``guard`` first, until ``stop`` is set."""
    from hypercorn.config import Config
    from hypercorn.trio import serve as hypercorn_serve
    from mcp.server.transport_security import TransportSecuritySettings

    # the guard checks Host and Origin for every request (403), before the SDK's app sees it
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = None
    config.errorlog = None
    config.loglevel = "WARNING"
    config.graceful_timeout = 1.0
    await hypercorn_serve(guard.wrap(app), config, shutdown_trigger=stop.wait)
