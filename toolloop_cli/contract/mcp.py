"""MCP tools: what a server offers, read once at admission.

A server is reached over stdio (``command``) or Streamable HTTP (``url``, with headers whose
values come from the environment variables ``headers_env`` names; those values are secrets, hidden
in every message). A stdio server is a third party's program: its environment is the MCP SDK's safe
default (``HOME``, ``LOGNAME``, ``PATH``, ``SHELL``, ``TERM``, ``USER``), the registry's ``env``
and the variables ``pass_env`` names, whose values are secrets too; nothing else of toolloop's
environment reaches it. A tool's description and schemas come from the server's ``tools/list``
unless the registry pins them; with ``trusted: true`` its annotations give the tool's default
``effect`` and ``idempotent`` too. Admission lists each server that a subagent's MCP tools need,
fills in the tool specs (validators compiled like any other) and, when a ``toolloop.lock`` beside
the registry holds the schema hashes of MCP tools, refuses a server whose tools' schemas changed
(TL372). Admission itself starts nothing: listing the servers is a step of its own, run by whoever
owns the event loop before admission (``discovered``, ``mcp_servers.discovered_async``), and admission reads what it
found (a ``Listing``). The servers listed are kept for the run that follows (``mcp_servers.py``),
so a run starts each server once.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from .._canonical import sha256_of
from .._secrets import Scrubber, credential_parts
from .._text import listing, quoted
from .compiled import SubagentSpec, ToolSpec
# the discovery step's hand-off lives in a light module of its own; its callers may import it from here
from .mcp_discovery import RECORDED, Listing, ServersNeeded, discovered, listed  # noqa: F401
from .mcp_tokens import unset_variables
from .problems import Collector, Problem
from .schemas import check_refs, compile_validator, meta_errors

INSTALL_LINE = "pip install 'toolloop-cli[mcp]'"
LOCK_NAME = "toolloop.lock"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class McpConfigError(Exception):
    """A server that cannot be reached as declared (an unset header variable)."""


def client_missing() -> str | None:
    """Why the MCP client (the ``mcp`` extra) cannot be imported, or None when it can."""
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        return str(exc) or type(exc).__name__
    return None


def server_key(decl: Any) -> tuple:
    """One server per distinct command line and environment, or address and headers."""
    if decl.url is not None:
        key = ("url", decl.url, tuple(sorted(decl.headers_env.items())))
        auth = getattr(decl, "auth", None)
        return key if auth is None else key + (json.dumps(auth.model_dump(mode="json"), sort_keys=True),)
    return (tuple(decl.command), tuple(sorted(decl.env.items())), tuple(decl.pass_env))


def server_name(decl: Any) -> str:
    """How messages name a server (an address is shown without its query string)."""
    if decl.url is not None:
        return decl.url.split("?", 1)[0]
    return " ".join(decl.command)


def server_env(decl: Any, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a stdio server gets on top of the SDK's safe default environment: the registry's
    ``env`` and the ``pass_env`` variables that are set here (an unset one is not passed)."""
    environ = os.environ if environ is None else environ
    env = dict(decl.env)
    env.update({name: environ[name] for name in decl.pass_env if name in environ})
    return env


def server_params(decl: Any) -> Any:
    from mcp import StdioServerParameters

    return StdioServerParameters(command=decl.command[0], args=list(decl.command[1:]), env=server_env(decl))


def headers(decl: Any, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The HTTP headers sent to a server, their values read from the environment."""
    environ = os.environ if environ is None else environ
    out = {}
    for name, var in decl.headers_env.items():
        value = environ.get(var)
        if not value:
            raise McpConfigError(f"environment variable {var} (header {name} of MCP server {server_name(decl)})"
                                 " is not set")
        out[name] = value
    return out


def secrets(decls: Iterable[Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """The values these servers get from toolloop's environment (HTTP headers, ``pass_env``
    variables, client secrets) and the tokens they were sent, hidden wherever they would be
    written; for a credential such as ``Bearer TOKEN`` the token alone too, which a careless
    server may quote."""
    from .mcp_tokens import secrets as client_secrets

    environ = os.environ if environ is None else environ
    decls = [d for d in decls if d is not None]
    names = [var for d in decls for var in (d.headers_env.values() if d.url is not None else d.pass_env)]
    return [part for var in names if environ.get(var) for part in credential_parts(environ[var])] \
        + client_secrets([d for d in decls if d.url is not None], environ)


def check_declaration(tid: str, m: Any, where: tuple, col: Collector) -> None:
    """TL317: an ``mcp`` block that is neither a stdio server nor an HTTP one, keys that belong to
    the other kind, and ``pass_env`` entries that are not variable names."""
    if (m.command is None) == (m.url is None):
        found = "both" if m.command is not None else "neither"
        col.add("TL317", f"the mcp block of tool {quoted(tid)} needs exactly one of 'command' or 'url', found {found}",
                where, "command: [...] starts a server over stdio; url: reaches one over Streamable HTTP",
                at_key=True)
    elif m.url is not None:
        if not m.url.startswith(("http://", "https://")):
            col.add("TL317", f"mcp.url of tool {quoted(tid)} must be an http:// or https:// address", where + ("url",),
                    "e.g. url: http://127.0.0.1:8931/mcp")
        for key in ("env", "pass_env"):
            if getattr(m, key):
                col.add("TL317", f"mcp.{key} of tool {quoted(tid)} applies to a server started with 'command', not to"
                        " a url", where + (key,), "pass secrets to an HTTP server as headers: headers_env:"
                        " {Header: ENV_VAR}", at_key=True)
    elif m.headers_env:
        col.add("TL317", f"mcp.headers_env of tool {quoted(tid)} applies to a server reached by 'url'",
                where + ("headers_env",), "give a server started with 'command' its environment with env: and"
                " pass_env:", at_key=True)
    seen: set[str] = set()
    for i, name in enumerate(m.pass_env):
        if not _ENV_NAME.fullmatch(name):
            col.add("TL317", f"mcp.pass_env of tool {quoted(tid)} names {quoted(name)}, which is not an environment"
                    " variable's name", where + ("pass_env", i), "list names such as GITHUB_TOKEN (letters, digits"
                    " and '_', not starting with a digit)")
        elif name in m.env:
            col.add("TL317", f"mcp.pass_env of tool {quoted(tid)} names {quoted(name)}, which mcp.env sets too",
                    where + ("pass_env", i), "keep it in one of them: env for a literal value, pass_env to hand"
                    " this process's value through")
        elif name in seen:
            col.add("TL317", f"mcp.pass_env of tool {quoted(tid)} names {quoted(name)} twice", where + ("pass_env", i),
                    "list each variable once")
        seen.add(name)
    if m.auth is not None:
        _check_auth(tid, m, where + ("auth",), col)


def _check_auth(tid: str, m: Any, where: tuple, col: Collector) -> None:
    """TL317: client credentials on a stdio server, beside an ``Authorization`` header of
    ``headers_env``, naming something that is not a variable, or sent where plain HTTP leaves
    this machine."""
    from .mcp_tokens import may_send

    cc = m.auth.client_credentials
    at = where + ("client_credentials",)
    if m.url is None:
        col.add("TL317", f"mcp.auth of tool {quoted(tid)} applies to a server reached by 'url'", where,
                "a server started with 'command' gets its credentials through env: and pass_env:", at_key=True)
        return
    if any(name.lower() == "authorization" for name in m.headers_env):
        col.add("TL317", f"mcp.auth and the Authorization header of mcp.headers_env of tool {quoted(tid)} both set"
                " the Authorization header", where, "keep one of them: auth asks for tokens itself", at_key=True)
    for key in ("client_id_env", "client_secret_env"):
        name = getattr(cc, key)
        if not _ENV_NAME.fullmatch(name):
            col.add("TL317", f"mcp.auth.client_credentials.{key} of tool {quoted(tid)} must name an environment"
                    " variable, not hold a value", at + (key,), f"write e.g. {key}: TICKETS_CLIENT_"
                    f"{'ID' if key == 'client_id_env' else 'SECRET'} and export the value in that variable")
    if cc.token_url is not None and not may_send(cc.token_url):
        col.add("TL317", f"mcp.auth.client_credentials.token_url of tool {quoted(tid)} must be an https:// address"
                " (or http:// on loopback)", at + ("token_url",), "the client secret is never sent over plain HTTP"
                " to another machine")
    if m.url.startswith("http://") and not may_send(m.url):
        col.add("TL317", f"mcp.url of tool {quoted(tid)} must be an https:// address (or http:// on loopback) when"
                " mcp.auth is set", where[:-1] + ("url",), "a token is never sent over plain HTTP to another machine")


def hide(text: str, values: Iterable[str]) -> str:
    """``text`` with each secret value replaced by ``[REDACTED]`` (the whole-token rule of
    ``_secrets.Scrubber`` for short values)."""
    return Scrubber(values).text(text)


def hide_deep(value: Any, values: list[str]) -> Any:
    """``value`` with every string in it hidden as ``hide`` does (a key only when it holds a secret)."""
    return Scrubber(values).deep(value)


def schema_hash(offered: Any) -> str:
    """What ``toolloop lock`` records of a server's tool: the hash of its schemas."""
    return sha256_of({"name": offered.name, "input_schema": offered.input_schema,
                      "output_schema": getattr(offered, "output_schema", None)})


def annotated_effect(offered: Any) -> tuple[str, bool]:
    """``(effect, idempotent)`` from a tool's annotations; a missing hint takes the MCP
    specification's default (readOnlyHint false, destructiveHint true, idempotentHint false)."""
    notes = getattr(offered, "annotations", None)

    def hint(name: str, default: bool) -> bool:
        value = getattr(notes, name, None) if notes is not None else None
        return default if value is None else bool(value)

    if hint("read_only_hint", False):
        return "read", True
    effect = "destructive" if hint("destructive_hint", True) else "write"
    return effect, hint("idempotent_hint", False)


def _problem(tool: ToolSpec, message: str, hint: str, code: str = "TL313") -> Problem:
    file, line, col = tool.source
    return Problem(code, message, file, line, col, f"subagents.{tool.subagent}.tools.{tool.id}.mcp", hint)


def read_locked_hashes(registry_file: str | os.PathLike | None) -> dict[str, str] | None:
    """The MCP schema hashes ``toolloop lock`` recorded for this registry ("subagent/tool" -> hash),
    or None when there is no lock beside it or it holds none (an unreadable lock is for
    ``validate --locked`` to report)."""
    if not registry_file:
        return None
    path = Path(registry_file)
    try:
        data = json.loads((path.parent / LOCK_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    entry = data
    if isinstance(data.get("registries"), dict):  # one lock per folder, an entry per registry file
        entry = data["registries"].get(path.name)
    elif data.get("registry") not in (None, path.name):
        return None
    hashes = entry.get("mcp") if isinstance(entry, dict) else None
    return hashes if isinstance(hashes, dict) and hashes else None


def _wanted(sub: SubagentSpec, locked: Mapping[str, str] | None, hashes: dict[str, str] | None) -> list[ToolSpec]:
    """The MCP tools of ``sub`` whose servers must be listed: those taking something from their
    server, those ``locked`` records, or all of them when ``hashes`` are asked for."""
    return [t for t in sub.tools.values() if t.kind == "mcp" and (
        t.from_server or hashes is not None or (locked and f"{sub.id}/{t.id}" in locked))]


def servers_to_list(sub: SubagentSpec, *, locked: Mapping[str, str] | None = None, hashes: bool = False) -> list[Any]:
    """The declarations of the servers ``resolve_server_tools`` will need listed, one per server
    (not those whose client-credential variables are unset: they are findings)."""
    if client_missing() is not None:
        return []
    decls: dict[tuple, Any] = {}
    for t in _wanted(sub, locked, {} if hashes else None):
        if not unset_variables(t.mcp):
            decls.setdefault(server_key(t.mcp), t.mcp)
    return list(decls.values())


#: set while ``validate`` checks files, which does not need client-credential variables: a server
#: whose variables are unset is then left unchecked with a warning instead of refused
_CREDENTIALS_OPTIONAL: ContextVar[bool] = ContextVar("toolloop_mcp_credentials_optional", default=False)


@contextmanager
def credentials_optional() -> Iterator[None]:
    """Within: MCP servers whose client-credential variables are unset are skipped with a warning."""
    token = _CREDENTIALS_OPTIONAL.set(True)
    try:
        yield
    finally:
        _CREDENTIALS_OPTIONAL.reset(token)


def _unset_credentials(sub: SubagentSpec, wanted: list[ToolSpec]) -> tuple[set[tuple], list[Problem]]:
    """The servers (keys) whose client-credential variables are unset, and the findings: for a run,
    an error for each MCP tool of ``sub`` whose server has one unset (exit 3 at admission); while
    validating, a warning for each such server that was to be listed."""
    optional = _CREDENTIALS_OPTIONAL.get()
    keys: set[tuple] = set()
    problems: list[Problem] = []
    for t in (wanted if optional else [t for t in sub.tools.values() if t.kind == "mcp"]):
        names = unset_variables(t.mcp)
        if not names:
            continue
        key = server_key(t.mcp)
        again = key in keys
        keys.add(key)
        if optional and again:  # one warning for each server
            continue
        said = " and ".join(names)
        verb = "is" if len(names) == 1 else "are"
        if optional:
            problems.append(replace(_problem(
                t, f"MCP server {quoted(server_name(t.mcp))} was not checked: the environment variable{'s' * (len(names) > 1)}"
                   f" {said} (mcp.auth.client_credentials) {verb} not set",
                f"export {said} to check the server's tools"), level="warning"))
        else:
            problems.append(_problem(
                t, f"tool {quoted(t.id)} needs the environment variable{'s' * (len(names) > 1)} {said}"
                   f" (mcp.auth.client_credentials of MCP server {quoted(server_name(t.mcp))}), which {verb} not set",
                f"export {said} before running the plan"))
    return keys, problems


def resolve_server_tools(sub: SubagentSpec, servers: Listing, *, locked: Mapping[str, str] | None = None,
                         hashes: dict[str, str] | None = None) -> tuple[SubagentSpec, list[Problem]]:
    """``sub`` with its MCP tools filled in from what their servers offer (``servers``, found by
    the discovery step), and the problems found (TL313, TL320-TL322 for a server schema that is
    not valid, TL372 for a server whose schemas differ from ``locked``). ``hashes``, when given,
    receives every listed tool's schema hash. Nothing is started or changed here: a server
    ``servers`` lacks raises ``ServersNeeded``."""
    wanted = _wanted(sub, locked, hashes)
    unset, problems = _unset_credentials(sub, wanted)
    wanted = [t for t in wanted if server_key(t.mcp) not in unset]
    if not wanted:
        return sub, problems
    if client_missing() is not None:
        return sub, problems + [_problem(t, f"tool {quoted(t.id)} comes from an MCP server, and the MCP client is not"
                                            " installed", INSTALL_LINE) for t in wanted]
    by_server: dict[tuple, list[ToolSpec]] = {}
    for t in wanted:
        by_server.setdefault(server_key(t.mcp), []).append(t)
    servers = _with_recorded(sub, by_server, servers)
    needed = [tools[0].mcp for key, tools in by_server.items() if key not in servers]
    if needed:
        raise ServersNeeded(needed)
    filled: dict[str, ToolSpec] = {}
    for key, tools in by_server.items():
        offered = servers[key]
        if isinstance(offered, str):
            problems += _unreached(tools, offered)
            continue
        for t in tools:
            fixed, found = _with_offered(sub, t, offered, locked, hashes)
            problems += found
            if fixed is not None:
                filled[t.id] = fixed
    if filled:
        sub = replace(sub, tools={**sub.tools, **filled})
    return sub, problems


def _with_recorded(sub: SubagentSpec, by_server: dict[tuple, list[ToolSpec]], servers: Listing) -> Listing:
    """``servers`` with each server the listing lacks taken from the recorded offers, when they
    hold every tool of this subagent that the server serves (else the server is listed)."""
    recorded = servers.get(RECORDED)
    if not isinstance(recorded, Mapping):
        return servers
    taken: dict[tuple, Any] = {}
    for key, tools in by_server.items():
        offers = [recorded.get(f"{sub.id}/{t.id}") for t in tools]
        if key not in servers and all(isinstance(o, Mapping) for o in offers):
            taken[key] = {t.ref: recorded_offer(o) for t, o in zip(tools, offers)}  # type: ignore[arg-type]
    return {**servers, **taken} if taken else servers


def _unreached(tools: list[ToolSpec], why: str) -> list[Problem]:
    decl = tools[0].mcp
    how = "reached" if decl.url is not None else "started"
    fix = ("check mcp.url, that the server runs, and the variables in mcp.headers_env"
           if decl.url is not None else "check that mcp.command starts the server")
    return [_problem(t, f"MCP server {quoted(server_name(decl))} for tool {quoted(t.id)} could not be {how} or"
                        f" listed: {why}", fix) for t in tools]


def _with_offered(sub: SubagentSpec, t: ToolSpec, offered: dict[str, Any], locked: Mapping[str, str] | None,
                  hashes: dict[str, str] | None) -> tuple[ToolSpec | None, list[Problem]]:
    """One MCP tool checked against what its server offers: filled in (when it takes something
    from the server), or the problems (no such tool; schemas changed since the lock)."""
    decl = t.mcp
    found = offered.get(t.ref)
    if found is None:
        return None, [_problem(t, f"MCP server {quoted(server_name(decl))} offers no tool {quoted(t.ref)}",
                               f"it offers: {listing(sorted(offered)) or 'nothing'}")]
    name = f"{sub.id}/{t.id}"
    digest = schema_hash(found)
    if hashes is not None:
        hashes[name] = digest
    if locked and name in locked and locked[name] != digest:
        return None, [_problem(
            t, f"the schemas of tool {quoted(t.ref)} on MCP server {quoted(server_name(decl))} changed since"
               f" {LOCK_NAME} was written (tool {quoted(name)})",
            f"review the server's change, then run 'toolloop lock {t.source[0]}'", "TL372")]
    offer = offer_record(found)
    if not t.from_server:
        return replace(t, offered=offer), []
    fixed, problems = _with_server_schemas(t, found)
    return (replace(fixed, offered=offer) if fixed is not None else None), problems


#: a tool's MCP annotations as the protocol names them, and as the SDK's Tool has them (the hints
#: only: a title is free text that no admission reads, so none is kept)
_HINTS = {"readOnlyHint": "read_only_hint", "destructiveHint": "destructive_hint",
          "idempotentHint": "idempotent_hint", "openWorldHint": "open_world_hint"}


def offer_record(offered: Any) -> dict[str, Any]:
    """What a server offered for one tool (its values from toolloop's environment hidden, as
    listed), as JSON: ``name``, ``description``, ``input_schema``, ``output_schema``,
    ``annotations`` (their hints, by their protocol names; null when there are none)."""
    notes = getattr(offered, "annotations", None)
    hints = None
    if notes is not None:
        hints = {wire: getattr(notes, attr) for wire, attr in _HINTS.items() if getattr(notes, attr, None) is not None}
    return {"name": offered.name, "description": offered.description, "input_schema": offered.input_schema,
            "output_schema": getattr(offered, "output_schema", None), "annotations": hints}


def recorded_offer(record: Mapping[str, Any]) -> Any:
    """An ``offer_record`` read back as what a listing holds (the attributes admission reads)."""
    from types import SimpleNamespace

    hints = record.get("annotations")
    notes = (SimpleNamespace(**{attr: hints.get(wire) for wire, attr in _HINTS.items()})
             if isinstance(hints, dict) else None)
    return SimpleNamespace(name=record.get("name"), description=record.get("description"),
                           input_schema=record.get("input_schema"), output_schema=record.get("output_schema"),
                           annotations=notes)


def hidden_offer(offered: dict[str, Any], decl: Any) -> dict[str, Any]:
    """A server's tools with the values it gets from toolloop's environment hidden in their
    descriptions and schemas."""
    hidden = secrets([decl])
    if not hidden:
        return offered
    return {name: tool.model_copy(update={"description": hide(tool.description or "", hidden),
                                          "input_schema": hide_deep(tool.input_schema, hidden),
                                          "output_schema": hide_deep(getattr(tool, "output_schema", None), hidden)})
            for name, tool in offered.items()}


def _with_server_schemas(t: ToolSpec, offered: Any) -> tuple[ToolSpec | None, list[Problem]]:
    changes: dict[str, Any] = {"from_server": frozenset()}
    problems = []
    if "description" in t.from_server:
        changes["description"] = offered.description or ""
    if "effect" in t.from_server or "idempotent" in t.from_server:
        effect, idempotent = annotated_effect(offered)
        effect = effect if "effect" in t.from_server else t.effect
        idempotent = idempotent if "idempotent" in t.from_server else t.idempotent
        changes["effect"], changes["idempotent"] = effect, idempotent
        if effect in ("write", "destructive") and not idempotent and "timeout" in t.retry.on:
            # an at-most-once write is never tried again after a timeout
            changes["retry"] = replace(t.retry, on=t.retry.on - {"timeout"})
    for part, attr, schema in (("input", "input_schema", offered.input_schema),
                               ("output", "output_schema", getattr(offered, "output_schema", None))):
        if part not in t.from_server:
            continue
        schema = schema if schema is not None else {}
        bad = [m for _, m, _ in meta_errors(schema)] + [m for _, _, m in check_refs(schema)]
        if bad:
            problems.append(_problem(t, f"the server's {attr} for {quoted(t.id)} is not usable: {bad[0]}",
                                     f"pin {attr} in the registry"))
            continue
        changes[attr] = schema
        changes[f"{part}_validator"] = compile_validator(schema, mask=bool(t.redact))
    if problems:
        return None, problems
    return replace(t, **changes), []


def lock_problems(contract: Any, servers: Listing) -> list[Problem]:
    """TL372 (and TL313) for the MCP servers whose tools' schemas differ from those recorded in
    the ``toolloop.lock`` beside the registry; nothing when there is no such lock."""
    locked = read_locked_hashes(contract.file)
    if not locked:
        return []
    problems: list[Problem] = []
    for sub in contract.subagents.values():
        problems += resolve_server_tools(sub, servers, locked=locked)[1]
    return problems


def lock_servers(contract: Any) -> list[Any]:
    """The servers ``lock_problems`` needs listed."""
    locked = read_locked_hashes(contract.file)
    return [d for sub in contract.subagents.values() for d in servers_to_list(sub, locked=locked)] if locked else []


def schema_hashes(contract: Any, servers: Listing) -> tuple[dict[str, str], list[Problem]]:
    """Every MCP tool's schema hash ("subagent/tool" -> hash), for ``toolloop lock``."""
    hashes: dict[str, str] = {}
    problems: list[Problem] = []
    for sub in contract.subagents.values():
        problems += resolve_server_tools(sub, servers, hashes=hashes)[1]
    return dict(sorted(hashes.items())), problems


def hash_servers(contract: Any) -> list[Any]:
    """The servers ``schema_hashes`` needs listed."""
    return [d for sub in contract.subagents.values() for d in servers_to_list(sub, hashes=True)]
