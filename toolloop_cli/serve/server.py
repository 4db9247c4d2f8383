"""Running the app: Hypercorn's trio worker on one listening socket, until SIGINT or SIGTERM."""

from __future__ import annotations

import ipaddress
import signal
import socket
from typing import Any, Callable

from ..errors import UsageError


def listen(host: str, port: int) -> socket.socket:
    """The listening socket (bound now, so a port in use is a clear error before anything starts)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        from .._text import quoted

        raise UsageError(f"--host {quoted(host)} is not an address this machine can listen on: {exc.strerror}") from None
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {_text_excerpt(host)}:{port}: {exc.strerror or exc}"
                         " (another server may use that port: pick another with --port, or 0 for any free one)") from None
    return sock


def _text_excerpt(value: str) -> str:
    from .._text import excerpt

    return excerpt(value)


def is_loopback(sock: socket.socket) -> bool:
    try:
        return ipaddress.ip_address(sock.getsockname()[0].split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def every_address(sock: socket.socket) -> bool:
    """Whether the socket listens on every address of the machine (``--host 0.0.0.0`` or ``::``)."""
    try:
        return ipaddress.ip_address(sock.getsockname()[0].split("%", 1)[0]).is_unspecified
    except ValueError:
        return False


def openable_url(sock: socket.socket) -> str:
    """An address a browser on this machine can open: ``http://0.0.0.0:PORT`` cannot be opened
    as written, so a socket on every address is shown on loopback."""
    if every_address(sock):
        host, port = sock.getsockname()[:2]
        return f"http://[::1]:{port}" if ":" in host else f"http://127.0.0.1:{port}"
    return url_of(sock)


def serve(app: Any, sock: socket.socket, on_ready: Callable[[], None] = lambda: None) -> None:
    """Serve ``app`` on ``sock`` under trio until SIGINT or SIGTERM (then stop gracefully)."""
    import trio
    from hypercorn.config import Config
    from hypercorn.trio import serve as hypercorn_serve

    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = None
    config.loglevel = "WARNING"
    config.graceful_timeout = 1.0

    async def main() -> None:
        stop = trio.Event()
        # signals are taken from the start: a SIGTERM right after the server says it is ready stops it gracefully too
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:

                async def until_signal() -> None:
                    async for _signum in signals:
                        stop.set()
                        return

                async def serving(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                    await hypercorn_serve(app, config, shutdown_trigger=stop.wait, task_status=task_status)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(until_signal)
                await nursery.start(serving)
                on_ready()

    trio.run(main)
