"""The MCP servers of this process: started once, listed before admission, called by runs.

Listing the servers a plan needs is a step of its own, run before admission by whoever owns the
event loop (``contract.mcp.discovered`` for a caller with none, ``discovered_async`` from a trio
loop): admission reads what it found and starts nothing. An MCP session cannot move from one event loop
to another; so every session lives on an event loop of its own, in a daemon thread (the host),
and both sides reach it there: the discovery step waits on it, a run awaits its requests from its
own loop (``on_host``, cancelled there when the call is cancelled). This module starts, lists and
stops servers; calling their tools is the engine's (``engine/executors/mcp.py``). A server listed
before admission is parked for the run that follows, which takes it (``take``): a run starts each
server once. A parked server nobody takes is stopped after ``PARK_S`` seconds, or when the
process ends.

Starting a server (its process and the ``initialize`` handshake, or reaching its address) and
listing its tools are bounded by ``START_TIMEOUT_S`` each, never by a tool's ``timeout_s``: a call's
deadline covers the call only.

toolloop's standard error carries toolloop's lines: what the MCP SDK logs (a server line on stdout
that is not JSON-RPC, which the SDK then ignores; an answer arriving after its request timed out)
is dropped, and a stdio server's own standard error is kept, its last lines quoted (secrets hidden)
when the server fails. ``TOOLLOOP_DEBUG=1`` shows both as they come, secrets hidden.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import os
import sys
import threading
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Iterable, TypeVar

import trio

from .._text import error_text, excerpt, quoted
from .mcp import (Listing, McpConfigError, ServersNeeded, headers, hidden_offer, hide, secrets, server_key, server_name,
                  server_params)

T = TypeVar("T")

#: seconds a server has to start (and answer ``initialize``), and then to answer ``tools/list``
START_TIMEOUT_S = 60.0
#: seconds a server listed at admission waits for the run that follows before it is stopped
PARK_S = 600.0
#: seconds stopping a server, or a cancelled request, may take before it is left behind
STOP_S = 6.0
_TAIL_CHARS = 2000


class ServerError(Exception):
    """A server that could not be started, reached or listed, or that stopped: the message names
    it and says why, with no secret in it."""


def _debug() -> bool:
    return os.environ.get("TOOLLOOP_DEBUG", "") not in ("", "0")


def _scrub(text: str, decl: Any) -> str:
    return hide(text, secrets([decl]))


class _SdkLog(logging.Handler):
    """The MCP SDK's log records: dropped, or on standard error with ``TOOLLOOP_DEBUG=1``."""

    def emit(self, record: logging.LogRecord) -> None:
        if not _debug():
            return
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot be formatted is not worth a crash
            return
        try:
            decls = [s.decl for s in list(_LIVE)]
        except RuntimeError:  # changed meanwhile by another thread
            decls = []
        for decl in decls:
            text = _scrub(text, decl)
        sys.stderr.write(f"toolloop: debug: {record.name}: {excerpt(text, 300)}\n")


# ------------------------------------------------------------------------------------- the host


class _Job:
    """One coroutine run on the host; its outcome is a future any thread can wait on."""

    def __init__(self, host: _Host):
        self.host = host
        self.scope = trio.CancelScope()
        self.future: concurrent.futures.Future = concurrent.futures.Future()

    async def run(self, afn: Callable, args: tuple) -> None:
        try:
            with self.scope:
                value = await afn(*args)
                self.future.set_result(value)
                return
            self.future.set_exception(ServerError("cancelled"))  # by the side that waited
        except Exception as exc:  # noqa: BLE001 - handed to whoever waits
            while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]  # the SDK's task groups wrap what went wrong
            self.future.set_exception(exc)
        finally:
            if not self.future.done():  # the host itself went down
                self.future.set_exception(ServerError("the MCP client stopped"))

    def cancel(self) -> None:
        try:
            self.host.token.run_sync_soon(self.scope.cancel)
        except trio.RunFinishedError:
            pass


class _Host:
    """A trio event loop in a daemon thread, for the length of the process."""

    def __init__(self) -> None:
        ready = threading.Event()
        self.token: Any = None
        self.nursery: Any = None

        async def main() -> None:
            self.token = trio.lowlevel.current_trio_token()
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                ready.set()
                await trio.sleep_forever()

        threading.Thread(target=trio.run, args=(main,), name="toolloop-mcp", daemon=True).start()
        ready.wait()

    def submit(self, afn: Callable, *args: Any) -> _Job:
        job = _Job(self)
        self.token.run_sync_soon(lambda: self.nursery.start_soon(job.run, afn, args))
        return job


_HOST: _Host | None = None
_HOST_LOCK = threading.Lock()


def _host() -> _Host:
    global _HOST
    with _HOST_LOCK:
        if _HOST is None:
            for name in ("mcp", "httpx2"):
                logger = logging.getLogger(name)
                logger.addHandler(_SdkLog())
                logger.propagate = False
            _HOST = _Host()
            atexit.register(_stop_all)
    return _HOST


def _blocking(afn: Callable, *args: Any) -> Any:
    """``afn(*args)`` on the host, waited for here (Ctrl-C cancels it there)."""
    job = _host().submit(afn, *args)
    try:
        return job.future.result()
    except KeyboardInterrupt:
        job.cancel()
        concurrent.futures.wait([job.future], timeout=STOP_S)
        raise


async def _awaited(afn: Callable, *args: Any) -> Any:
    """``afn(*args)`` on the host, awaited from another trio loop: cancelling this cancels it there."""
    job = _host().submit(afn, *args)
    done = trio.Event()
    token = trio.lowlevel.current_trio_token()

    def wake(_future: Any) -> None:
        try:
            token.run_sync_soon(done.set)
        except trio.RunFinishedError:
            pass

    job.future.add_done_callback(wake)
    try:
        await done.wait()
    except BaseException:
        job.cancel()
        with trio.CancelScope(shield=True):
            with trio.move_on_after(STOP_S):
                await done.wait()
        raise
    return job.future.result()


# ----------------------------------------------------------------------------------- a server


class Server:
    """One server and its MCP session, on the host."""

    def __init__(self, decl: Any):
        self.decl = decl
        self.key = server_key(decl)
        self.name = server_name(decl)
        self.session: Any = None
        self.tools: dict[str, Any] | None = None  # tools/list, read once
        self.http_status: tuple[int, str] | None = None  # the server's last 401 or 403
        self.auth: Any = None  # its client credentials (``mcp_auth.ClientCredentials``), when it has some
        self.tail = ""  # the last of what a stdio server wrote on its standard error
        self.ended = False
        self._closing: Any = None
        self._ended: Any = None
        self._ticket = 0  # which parking is current
        self._stderr_read = trio.Event()

    @property
    def alive(self) -> bool:
        return self.session is not None and not self.ended

    async def _serve(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        from mcp import ClientSession

        self._closing, self._ended = trio.Event(), trio.Event()
        try:
            async with self._transport() as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    self.session = session
                    task_status.started()
                    await self._closing.wait()
        except Exception:
            if self.session is None:
                raise  # whoever started it says why
            # the server went away during the run: its calls now fail with error receipts
        finally:
            self.ended = True
            self._ended.set()

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        decl = self.decl
        if decl.url is not None:
            self._stderr_read.set()  # nothing to read
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            async def note(response: Any) -> None:
                # the SDK says "Server returned an error response" for a refusal: keep what it was
                if response.status_code in (401, 403):
                    self.http_status = (response.status_code, response.reason_phrase or "")
                elif response.status_code < 400:  # a refusal the client credentials got past
                    self.http_status = None

            if decl.auth is not None:
                from .mcp_auth import ClientCredentials

                self.auth = ClientCredentials(decl)  # McpConfigError when a variable is unset
            client = create_mcp_http_client(headers=headers(decl), auth=self.auth)
            client.event_hooks = {"request": [], "response": [note]}
            async with client:
                async with streamable_http_client(decl.url, http_client=client) as streams:
                    yield streams[0], streams[1]
            return
        from mcp.client.stdio import stdio_client

        read_end, write_end = os.pipe()
        errlog = os.fdopen(write_end, "w")
        try:
            async with stdio_client(server_params(decl), errlog=errlog) as (read, write):
                errlog.close()  # the server holds its own end; ours would keep the pipe open
                _host().nursery.start_soon(self._keep_stderr, read_end)
                read_end = -1
                yield read, write
        finally:
            errlog.close()
            if read_end >= 0:  # the server never started
                os.close(read_end)
                self._stderr_read.set()

    async def _keep_stderr(self, fd: int) -> None:
        try:
            async with trio.lowlevel.FdStream(fd) as stream:
                while chunk := await stream.receive_some(4096):
                    text = chunk.decode("utf-8", "replace")
                    self.tail = (self.tail + text)[-_TAIL_CHARS:]
                    if _debug():
                        for line in text.splitlines():
                            sys.stderr.write(f"toolloop: debug: MCP server {quoted(self.name)}: "
                                             f"{excerpt(_scrub(line, self.decl), 300)}\n")
        except (OSError, trio.ClosedResourceError):
            pass
        finally:
            self._stderr_read.set()

    def why(self, exc: BaseException, doing: str) -> str:
        """What went wrong, in one line without secrets."""
        first = exc
        while isinstance(first, BaseExceptionGroup) and first.exceptions:
            first = first.exceptions[0]
        if isinstance(first, trio.TooSlowError):
            text = f"it did not {doing} within {START_TIMEOUT_S:g}s"
        elif isinstance(first, McpConfigError):
            text = str(first)
        elif self.auth is not None and self.auth.failure is not None:
            text = self.auth.failure
        elif self.http_status is not None:
            from urllib.parse import urlsplit

            parts = urlsplit(self.decl.url)
            code, reason = self.http_status
            text = f"{parts.scheme}://{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}" \
                   f" answered HTTP {code}{' ' + reason if reason else ''}"
            if code in (401, 403) and self.decl.headers_env:
                names = ", ".join(sorted(self.decl.headers_env.values()))
                text += f": check the value of {names} (mcp.headers_env)"
        elif isinstance(first, FileNotFoundError) and self.decl.url is None:
            text = f"cannot run {quoted(self.decl.command[0])}: no such file"
        else:
            text = error_text(first)
        last = [ln.strip() for ln in self.tail.splitlines() if ln.strip()]
        if last and self.decl.url is None:
            text += f"; the last line it wrote on standard error: {excerpt(last[-1], 200)}"
        return _scrub(text, self.decl)

    async def _gone(self) -> bool:
        """Whether a stdio server's process has ended (its standard error closed), after a request
        to it failed; from then on it is not alive."""
        if self.decl.url is None:
            with trio.move_on_after(0.5):
                await self._stderr_read.wait()
            if self._stderr_read.is_set():
                self.ended = True
        return self.ended

    def stopped(self) -> str:
        """Why a call to a server that went away failed."""
        last = [ln.strip() for ln in self.tail.splitlines() if ln.strip()]
        text = f"MCP server {quoted(self.name)} stopped during the run"
        if last:
            text += f"; the last line it wrote on standard error: {excerpt(last[-1], 200)}"
        return _scrub(text, self.decl)


_LIVE: set[Server] = set()
_PARKED: dict[tuple, list[Server]] = {}
_LOCK = threading.Lock()


async def _start(decl: Any) -> Server:
    server = Server(decl)
    try:
        with trio.fail_after(START_TIMEOUT_S):
            await _host().nursery.start(server._serve)
    except Exception as exc:  # noqa: BLE001 - said as one line
        with trio.move_on_after(0.5):  # what it wrote on standard error before it went
            await server._stderr_read.wait()
        raise ServerError(server.why(exc, "start" if decl.url is None else "answer")) from None
    _LIVE.add(server)
    return server


async def _list(server: Server) -> dict[str, Any]:
    if server.tools is None:
        try:
            with trio.fail_after(START_TIMEOUT_S):
                listing = await server.session.list_tools()
        except Exception as exc:  # noqa: BLE001 - said as one line
            raise ServerError(server.why(exc, "list its tools")) from None
        server.tools = {tool.name: tool for tool in listing.tools}
    return server.tools


async def _close(server: Server) -> None:
    _LIVE.discard(server)
    if server._closing is not None:
        server._closing.set()
        with trio.move_on_after(STOP_S):
            await server._ended.wait()


async def _expire(server: Server, ticket: int) -> None:
    await trio.sleep(PARK_S)
    with _LOCK:
        parked = _PARKED.get(server.key, [])
        if server not in parked or server._ticket != ticket:
            return
        parked.remove(server)
    await _close(server)


# ------------------------------------------------------------------------------ the interface


async def gone(server: Server) -> bool:
    """Whether ``server`` went away (asked after a request to it failed)."""
    return await _awaited(server._gone)


def take(key: tuple) -> Server | None:
    """A server with this key that admission left running, now the caller's."""
    with _LOCK:
        parked = _PARKED.get(key, [])
        while parked:
            server = parked.pop()
            if server.alive:
                return server
    return None


def park(server: Server) -> None:
    """Leave ``server`` running for the run that follows (``take``), for ``PARK_S`` at most."""
    if not server.alive:
        return
    with _LOCK:
        server._ticket += 1
        _PARKED.setdefault(server.key, []).append(server)
        ticket = server._ticket
    _host().submit(_expire, server, ticket)


async def _list_all(decls: list[Any]) -> dict[tuple, Any]:
    """On the host: each server started (or a parked one taken), listed and parked for the run
    that follows; by server key, its tools (secrets hidden) or why it could not be listed."""
    found: dict[tuple, Any] = {}
    for decl in decls:
        key = server_key(decl)
        if key in found:
            continue
        try:
            server = take(key) or await _start(decl)
            try:
                offered = await _list(server)
            except BaseException:
                await _close(server)
                raise
            park(server)
            found[key] = hidden_offer(offered, decl)
        except Exception as exc:  # noqa: BLE001 - a server that cannot be reached is a finding
            while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]  # the SDK's task groups wrap what went wrong
            found[key] = str(exc)
    return found


async def list_servers(decls: Iterable[Any]) -> dict[tuple, Any]:
    """The discovery step, awaited from the caller's trio loop: what each server offers (a
    ``contract.mcp.Listing``), the servers left running for the run that follows."""
    return await _awaited(_list_all, list(decls))


def list_servers_blocking(decls: Iterable[Any]) -> dict[tuple, Any]:
    """``list_servers`` for a caller with no event loop of its own (Ctrl-C cancels it)."""
    decls = list(decls)
    return _blocking(_list_all, decls) if decls else {}


async def discovered_async(admit: Callable[[Listing], T]) -> T:
    """``contract.mcp.discovered`` for a caller in a trio loop (admission itself does no I/O)."""
    servers: dict[tuple, Any] = {}
    while True:
        try:
            return admit(servers)
        except ServersNeeded as need:
            servers.update(await list_servers(need.decls))


async def start(decl: Any) -> Server:
    """A parked server for ``decl``, else one started now, from a trio loop. Raises ServerError."""
    return take(server_key(decl)) or await _awaited(_start, decl)


async def on_host(afn: Callable, *args: Any) -> Any:
    """``afn(*args)`` run where the sessions live (a request on a server's session), awaited from
    the caller's trio loop; cancelling this cancels it there."""
    return await _awaited(afn, *args)


async def close(server: Server) -> None:
    with trio.CancelScope(shield=True):
        await _awaited(_close, server)


def _stop_all() -> None:
    """At exit: stop every server still running (parked ones above all), in a bounded time."""
    with _LOCK:
        _PARKED.clear()
    servers = list(_LIVE)
    if not servers or _HOST is None:
        return

    async def stop_all() -> None:
        async with trio.open_nursery() as nursery:
            for server in servers:
                nursery.start_soon(_close, server)

    job = _HOST.submit(stop_all)
    concurrent.futures.wait([job.future], timeout=STOP_S + 1)
