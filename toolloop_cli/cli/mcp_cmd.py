"""mcp serve: a subagent's allowed tools offered to MCP clients, every call governed (the mcp extra)."""

from __future__ import annotations

import functools
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from .common import fail, require_file
from .run_cmds import Approve

mcp_app = typer.Typer(help="toolloop as an MCP server.", no_args_is_help=True, rich_markup_mode=None)

DEFAULT_PORT = 8766


class Transport(str, Enum):
    stdio = "stdio"
    http = "http"


@mcp_app.command("serve")
def serve(
    registry: Path = typer.Argument(..., metavar="REGISTRY", help="Registry YAML file."),
    subagent: Optional[str] = typer.Option(None, "--subagent", metavar="S", help="Subagent whose allowed tools are offered (needed when the registry has several)."),
    transport: Transport = typer.Option(Transport.stdio, "--transport", metavar="stdio|http", help="stdio (MCP on standard input and output) or http (Streamable HTTP at /mcp)."),
    host: str = typer.Option("127.0.0.1", "--host", metavar="HOST", help="Address the http transport listens on (loopback unless you say otherwise)."),
    port: int = typer.Option(DEFAULT_PORT, "--port", min=0, max=65535, metavar="PORT", help="Port of the http transport (0: any free one)."),
    no_token: bool = typer.Option(False, "--no-token", help="http on loopback only: no bearer token."),
    approve: Approve = typer.Option(Approve.ask, "--approve", metavar="ask|all|none", help="Approval gates: ask (pending for 'toolloop approve' or the web inbox), all, or none."),
    max_calls: Optional[int] = typer.Option(None, "--max-calls", min=0, metavar="N", help="Calls this server process runs at most."),
    timeout: Optional[float] = typer.Option(None, "--timeout", metavar="SECONDS", help="Timeout in seconds for tools that set none."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help="Folder of state.db (default .toolloop, or TOOLLOOP_STATE_DIR)."),
) -> None:
    """Offer a subagent's allowed tools to MCP clients; every call governed and journaled in one run."""
    from ..mcpserve import INSTALL, missing_extra

    missing = missing_extra(transport.value)
    if missing is not None:
        fail(f"toolloop mcp serve needs the mcp extra ({missing} is not installed)", 2, INSTALL)
    require_file(registry, "registry")
    from ..engine.launch import Launch, RunOptions
    from ..engine.session import held_signals
    from ..errors import ConfigError
    from ..mcpserve.runner import McpServerRunner
    from ..mcpserve.transports import serve_http, serve_stdio
    from .common import print_findings

    guard = sock = None
    if transport is Transport.http:
        from ..mcpserve.guard import Guard, is_loopback_host, server_token
        from ..serve.server import listen, url_of

        if no_token and not is_loopback_host(host.strip("[]")):
            fail(f"--no-token is refused with --host {host}: without a token only loopback may be served", 2,
                 "drop --no-token (clients send the token), or serve on --host 127.0.0.1")
        sock = listen(host, port)
        sock.listen(128)  # a client that connects before the server is up waits in the backlog
        token, generated = (None, False) if no_token else server_token(os.environ)
        guard = Guard(host, sock.getsockname()[1], token)
    with held_signals(_log) as _count:
        launch = Launch(state_dir)
        options = RunOptions(default_timeout_s=timeout, approve=approve.value, order="completion")
        try:
            prepared = launch.mcp_server(registry, subagent, options)
        except ConfigError as exc:
            print_findings(exc.problems)
            raise typer.Exit(3)
        hint = "toolloop approve" + (f" --state-dir {state_dir}" if state_dir is not None else "")
        serving = serve_stdio if sock is None else functools.partial(serve_http, sock=sock, guard=guard)
        runner = McpServerRunner(prepared.plan, serving, max_calls=max_calls, approve_hint=hint)
        _log(f"run {prepared.run_id}: {len(runner.tools)} tool(s) of subagent '{prepared.plan.subagent.id}'")
        if sock is not None and guard is not None:
            _log(f"serving MCP on {url_of(sock)}/mcp")
            if guard.token is None:
                _log("no token (--no-token): any program on this machine may call")
            elif generated:
                _log(f"token: {guard.token}  (send Authorization: Bearer TOKEN; set TOOLLOOP_MCP_TOKEN to choose one)")
            else:
                _log("token: the value of TOOLLOOP_MCP_TOKEN")
        try:
            result = launch.start(prepared, _Discard(), runner=runner, on_signal=_log,
                                  on_warning=lambda text: _log(f"warning: {text}"))
        finally:
            launch.close()
    counts = {k: v for k, v in result.summary["counts"].items() if v}
    _log(f"stopped: run {prepared.run_id} {result.summary['status']}"
         + (f" ({', '.join(f'{v} {k}' for k, v in counts.items())})" if counts else " (no calls)"))
    raise typer.Exit(0)


class _Discard:
    """The run's records are in the journal (``runs show``); standard output is the protocol's."""

    def write(self, record: dict[str, object], line: bytes | None = None) -> None:
        return None

    def flush(self) -> None:
        return None


def _log(line: str) -> None:
    try:
        sys.stderr.write(f"toolloop mcp serve: {line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
