"""The MCP discovery step's hand-off with admission, light on purpose: every run's admission goes
through ``discovered``, and a registry with no MCP server never needs more of MCP than this (the
rest, ``mcp.py`` and the token store, loads only where a registry declares a server).

Admission reads what the servers offer from a ``Listing`` and raises ``ServersNeeded`` for a
server the listing lacks; ``discovered`` lists those servers (``mcp_servers.py``, which loads the
MCP host and trio) and admits again.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, TypeVar

T = TypeVar("T")


class ServersNeeded(Exception):
    """Admission needs what MCP servers offer, and the listing it was given lacks these servers:
    the caller lists them (the discovery step, ``mcp_servers.discovered``) and admits again."""

    def __init__(self, decls: list[Any]):
        super().__init__(f"{len(decls)} MCP server(s) to list first")
        self.decls = decls


#: what the discovery step found, by ``server_key``: the server's tools (name -> the SDK's Tool,
#: secrets hidden), or the message saying why it could not be started, reached or listed
Listing = Mapping[tuple, "dict[str, Any] | str"]

#: the key of a listing under which a recorded test case gives what each MCP tool's server
#: offered when the case was recorded ("subagent/tool" -> ``offer_record``)
RECORDED = ("recorded",)


def discovered(admit: Callable[[Listing], T], servers: dict[tuple, Any] | None = None) -> T:
    """``admit(listing)`` with the MCP discovery step before it, for a caller with no event loop
    of its own: admission reads what the servers offer, and when it needs a server the listing
    lacks (``ServersNeeded``; a child plan's registry may name more) that server is listed
    (``mcp_servers.list_servers_blocking``) and admission runs again. Nothing is read from a
    lane stream before ``ServersNeeded`` is raised, so admitting again reads every lane once.
    ``servers``, when given, is a listing kept across admissions and filled in here."""
    servers = {} if servers is None else servers
    while True:
        try:
            return admit(servers)
        except ServersNeeded as need:
            servers.update(listed(need.decls))


def listed(decls: Iterable[Any]) -> dict[tuple, Any]:
    """The discovery step for a caller with no event loop of its own: what each server offers
    (the MCP host, and trio, are loaded only when there is a server to list)."""
    decls = list(decls)
    if not decls:
        return {}
    from .mcp_servers import list_servers_blocking

    return list_servers_blocking(decls)
