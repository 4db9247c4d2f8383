"""One tool declaration of a registry checked and compiled into a ``ToolSpec``: a callable's,
an MCP server's or a child plan's (``plan: FILE``)."""

from __future__ import annotations

from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any

from .._canonical import sha256_of
from .._json import dumps
from .._paths import look_at
from .._text import clip, quoted
from . import schemas
from .approval import compile_approval
from .callables import detect_runtime, is_async, resolve
from .compiled import NO_RETRY, RetryPolicy, ToolSpec, timeout_of
from .document import load_document
from .envelope import compile_envelope
from .problems import Collector
from .quick import dumped

if TYPE_CHECKING:  # a declaration may also be read without the models (quick.py)
    from .models import ToolDecl


def compile_tool(
    sid: str,
    tid: str,
    t: ToolDecl,
    subagent_timeout: float | None,
    default_timeout_s: float | None,
    root: str | None,
    col: Collector,
    check_timeout: bool = True,
    misspelled: set[str] | frozenset[str] = frozenset(),
    missing: dict[str, list] | None = None,
) -> ToolSpec | None:
    """One tool declaration checked and compiled; every problem goes to ``col`` (None if any is an error)."""
    at = ("subagents", sid, "tools", tid)
    errors_before = sum(p.level == "error" for p in col.problems)
    _check_kind(tid, t, at, col)
    effect, idempotent, annotated = t.effect, t.idempotent, frozenset[str]()
    if t.mcp is not None:
        effect, idempotent, annotated = _mcp_effect(tid, t, at, col)
    fn, failed = _resolve_callable(tid, t, at, root, col, misspelled, missing)
    if check_timeout and t.timeout_s is None and subagent_timeout is None and default_timeout_s is None:
        col.add("TL310", f"tool {quoted(tid)} has no timeout", at,
                "set timeout_s on the tool or runner_defaults.tool_timeout_s", at_key=True)
    asynchronous, runtime = _runtime_of(t, fn, at, col)
    sandbox = _sandbox_of(tid, t, at, root, col, "callable" if t.mcp is None else "mcp", asynchronous)
    texts = {key: _json_text(getattr(t, key)) for key in _SCHEMA_KEYS}
    props, write_only = _properties(t, texts)
    validators = _compile_schemas(t, at, col, write_only, texts)
    envelope = _envelope_of(t, at, col)
    redact = _check_redaction(t, at, col, props, write_only)
    writes_once = _check_retry(tid, t, at, col)
    if t.mcp is not None and not annotated:  # an MCP tool of unknown effect is a write (TL316)
        writes_once = effect in ("write", "destructive") and not idempotent
    gate = _compile_gate(tid, t, at, col)
    if failed or sum(p.level == "error" for p in col.problems) > errors_before:
        return None
    timeout = _timeout_of(t, subagent_timeout, default_timeout_s)
    return ToolSpec(
        subagent=sid,
        id=tid,
        kind="callable" if t.callable is not None else "mcp",
        ref=t.callable or "",
        fn=fn,
        is_async=asynchronous,
        description=t.description or "",
        **_declared_schemas(t),
        input_validator=validators.get("input_schema"),
        output_validator=validators.get("output_schema"),
        cacheable=t.cacheable,
        timeout_s=timeout,
        retry=_retry_policy(t, writes_once),
        isolation=t.isolation,
        **_limits(t),
        effect=effect,
        idempotent=idempotent,
        redact=tuple(redact),
        approval=gate,
        approval_text=_approval_text(t),
        dispatch=tuple(t.dispatch),
        envelope=envelope,
        contract_sha256=sha256_of(dumped(t)),
        mcp=t.mcp,
        runtime=runtime,
        from_server=_from_server(t) | annotated,
        source=(col.smap.file, *col.smap.position(at, at_key=True)),
        sandbox=sandbox,
        output_trust=output_trust_of(t),
    )


def _envelope_of(t: ToolDecl, at: tuple, col: Collector) -> Any:
    """The tool's control envelope compiled (None when it has none or it is wrong: TL330)."""
    if t.control_envelope is None:
        return None
    envelope, eprobs = compile_envelope(t.control_envelope, t.output_schema)
    for sub, message in eprobs:
        col.add("TL330", message, at + ("control_envelope",) + sub,
                "fix the envelope mapping (see the control envelope section of docs/calls.md)")
    return envelope


def _declared_schemas(t: ToolDecl) -> dict[str, Any]:
    """The schemas as declared ({} where absent: an MCP tool's come from its server at admission)."""
    return {"input_schema": t.input_schema if t.input_schema is not None else {},
            "output_schema": t.output_schema if t.output_schema is not None else {}}


def _timeout_of(t: ToolDecl, subagent_timeout: float | None, default_timeout_s: float | None) -> float | None:
    return timeout_of(t.timeout_s, subagent_timeout, default_timeout_s)


def _retry_policy(t: ToolDecl, writes_once: bool) -> RetryPolicy:
    if t.retry is None:
        return NO_RETRY
    # by default a write that is not idempotent is retried after errors only (TL352)
    on = frozenset(t.retry.on) - ({"timeout"} if writes_once else set())
    return RetryPolicy(t.retry.max_attempts, t.retry.backoff_s, t.retry.max_backoff_s, on)


def _limits(t: ToolDecl) -> dict:
    c = t.concurrency
    return {"max_in_flight": c.max_in_flight if c else None, "per_second": c.per_second if c else None,
            "max_calls": t.max_calls}


def output_trust_of(t: ToolDecl) -> str:
    """Whose words a tool's results are: its own ``output_trust``, else an MCP tool's are untrusted
    unless its server is ``trusted: true``; everything else's trusted. (A child plan's answer is
    untrusted when its run was tainted: the engine knows that at run time.)"""
    if t.output_trust is not None:
        return t.output_trust
    if t.mcp is not None and not t.mcp.trusted:
        return "untrusted"
    return "trusted"


def _approval_text(t: ToolDecl) -> str | None:
    if t.approval is None:
        return None
    return "required" if t.approval == "required" else t.approval.when


def _from_server(t: ToolDecl) -> frozenset[str]:
    """MCP tools: which of description and schemas come from the server's tools/list."""
    if t.mcp is None:
        return frozenset()
    return frozenset(name for name, value in (("description", t.description), ("input", t.input_schema),
                                              ("output", t.output_schema)) if value is None)


def compile_plan_tool(sid: str, tid: str, t: ToolDecl, registry_path: FsPath, subagent_timeout: float | None,
                       default_timeout_s: float | None, col: Collector) -> ToolSpec | None:
    """A tool ``plan: FILE``: a routed plan run as a child run. Its input schema is the child plan's
    ``inputs`` (default: an object), its output schema the child's ``final_schema``; the child plan
    itself is admitted with the plan that calls it, which also sets the tool's effect (the
    strongest among the child's tools) unless the registry declares one."""
    at = ("subagents", sid, "tools", tid)
    looked = look_at(registry_path.parent / t.plan)  # type: ignore[operator]
    if looked.kind == "bad":
        col.add("TL315", f"plan tool {quoted(tid)}: {quoted(str(t.plan))} is not a readable plan file: {looked.why}",
                at + ("plan",), "fix the path (relative to the registry file) to a routed plan")
        return None
    child = (registry_path.parent / t.plan).resolve()  # type: ignore[operator]
    doc = load_document(child) if looked.kind == "file" else None
    data = doc.data if doc is not None and isinstance(doc.data, dict) else None
    if data is None:
        col.add("TL315", f"plan tool {quoted(tid)}: {quoted(str(t.plan))} is not a readable plan file", at + ("plan",),
                "fix the path (relative to the registry file) to a routed plan")
        return None
    inputs = data.get("inputs") if data.get("inputs") is not None else {"type": "object"}
    final = data.get("final_schema") if data.get("final_schema") is not None else {}
    # writeOnly properties of the child's schemas are redacted like `redact` pointers, as for
    # every other tool (the child's context is journaled redacted too)
    redact = list(t.redact)
    for schema in (inputs, final):
        try:
            redact.extend(p for p in schemas.write_only_pointers(schema) if p not in redact)
        except Exception:  # noqa: BLE001 - a malformed schema: the child plan's own admission reports it
            pass
    validators = {}
    for key, schema in (("input", inputs), ("output", final)):
        try:
            validators[key] = schemas.compile_validator(schema, mask=bool(redact))
        except Exception:  # noqa: BLE001 - the child plan's own admission reports its schema
            validators[key] = None
    errors_before = sum(p.level == "error" for p in col.problems)
    gate = _compile_gate(tid, t, at, col)
    _sandbox_of(tid, t, at, None, col, "plan", False)
    if sum(p.level == "error" for p in col.problems) > errors_before:
        return None
    timeout = _timeout_of(t, subagent_timeout, default_timeout_s)
    goal = data.get("goal")
    return ToolSpec(
        subagent=sid, id=tid, kind="plan", ref=str(child), fn=None, is_async=False,
        description=t.description or (goal if isinstance(goal, str) else ""),
        input_schema=inputs, output_schema=final, input_validator=validators["input"],
        output_validator=validators["output"], cacheable=t.cacheable, timeout_s=timeout,
        retry=_retry_policy(t, False), isolation="thread", **_limits(t),
        # "" until admission reads the child plan, unless the registry says
        effect=t.effect if "effect" in t.model_fields_set else "", idempotent=t.idempotent,
        redact=tuple(redact), approval=gate, approval_text=_approval_text(t), dispatch=(), envelope=None,
        contract_sha256=sha256_of([dumped(t), sha256_of(data)]),
        source=(col.smap.file, *col.smap.position(at, at_key=True)), output_trust=output_trust_of(t),
    )


def _sandbox_of(tid: str, t: ToolDecl, at: tuple, root: str | None, col: Collector, kind: str,
                asynchronous: bool) -> Any:
    """``sandbox.compile_sandbox`` for a tool that names a sandbox; for the others (which it
    would pass without a word) the sandbox module is not imported."""
    if t.isolation != "sandbox" and t.sandbox is None:
        return None
    from .sandbox import compile_sandbox

    return compile_sandbox(tid, t, at, root, col, kind, asynchronous)


def _check_kind(tid: str, t: ToolDecl, at: tuple, col: Collector) -> None:
    kinds = [k for k in ("callable", "mcp", "plan") if getattr(t, k) is not None]
    if len(kinds) != 1:
        found = " and ".join(kinds) if kinds else "none of them"
        col.add("TL309", f"tool {quoted(tid)} needs exactly one of 'callable', 'mcp' or 'plan', found {found}", at,
                "keep one of them" if kinds else "add 'callable: package.module:function'", at_key=True)
    if t.mcp is not None:
        from .mcp import client_missing

        why = client_missing()
        if why is not None:
            col.add("TL313", f"tool '{tid}' comes from an MCP server, and the MCP client cannot be imported ({why})",
                    at + ("mcp",), "pip install 'toolloop-cli[mcp]'", at_key=True)


def _resolve_callable(tid: str, t: ToolDecl, at: tuple, root: str | None, col: Collector,
                      misspelled: set[str] | frozenset[str], missing: dict[str, list] | None) -> tuple[Any, bool]:
    """The callable (or None) and whether it failed in a way reported later, once for all tools
    (a missing third-party module)."""
    if t.callable is None:
        return None, False
    for key in ("description", "input_schema", "output_schema"):
        if getattr(t, key) is None and key not in misspelled:
            col.add("TL202", f"required key {quoted(key)} is missing for callable tool {quoted(tid)}", at,
                    f"add '{key}:' ({'{}'} means open)" if key != "description" else "add 'description:'", at_key=True)
    if root is None:
        return None, False
    r = resolve(t.callable, root)
    if r.fn is None and r.missing is not None and missing is not None:
        missing.setdefault(r.missing, []).append((tid, at + ("callable",), r))  # one finding, in _compile
        return None, True
    if r.fn is None:
        col.add(r.code or "TL306", r.message, at + ("callable",), r.hint)
    return r.fn, False


def _runtime_of(t: ToolDecl, fn: Any, at: tuple, col: Collector) -> tuple[bool, str]:
    """Whether the callable is async, and the event loop it needs (contract/callables.py)."""
    asynchronous = fn is not None and is_async(fn)
    runtime = "trio"
    if asynchronous:
        runtime, suspects = detect_runtime(fn)
        if suspects:
            names = ", ".join(f"'{s}'" for s in suspects)
            col.add("TL314", f"async callable '{t.callable}' will run on trio, but it calls {names}, which"
                    f" {'is' if len(suspects) == 1 else 'are'} built on asyncio", at + ("callable",),
                    "decorate it with toolloop_cli.asyncio_tool to run it on asyncio (or set"
                    " fn.__toolloop_runtime__ = 'trio' if it does run on trio)", level="warning")
    if t.isolation == "process" and asynchronous:
        col.add("TL311", f"isolation: process applies to sync callables only, and {quoted(t.callable)} is async",
                at + ("isolation",), "remove 'isolation' or make the callable sync")
    return asynchronous, runtime


_SCHEMA_KEYS = ("input_schema", "output_schema")


def _json_text(schema: Any) -> bytes | None:
    """The schema's exact JSON text (keys in their written order; 1, 1.0 and true differ, as a
    message quotes a value as written), by which what is found of a schema is kept for the next
    tool that declares the same one; None for no schema, or one that is not JSON text."""
    if schema is None:
        return None
    try:
        return dumps(schema)
    except Exception:  # noqa: BLE001 - not JSON text: checked afresh (the checks say what is wrong)
        return None


#: each schema's properties, by its JSON text (``_json_text``); bounded as ``_OUTCOMES``
_PROPERTIES: dict[bytes, tuple[tuple[str, str, dict, tuple], ...]] = {}


def _properties(t: ToolDecl, texts: dict[str, bytes | None]
                ) -> tuple[dict[str, tuple[tuple[str, str, dict, tuple], ...]], dict[str, list[str]]]:
    """Each schema's properties (``schemas.iter_properties_at``) and its ``writeOnly`` pointers,
    from one walk of it: the validators' masking and the redaction checks both read them.
    ``texts``: each schema's JSON text (``_json_text``)."""
    props: dict[str, tuple[tuple[str, str, dict, tuple], ...]] = {}
    for key in _SCHEMA_KEYS:
        text = texts[key]
        found = _PROPERTIES.get(text) if text is not None else None
        if found is None:
            found = tuple(schemas.iter_properties_at(getattr(t, key)))
            if text is not None:
                if len(_PROPERTIES) >= _OUTCOMES_MAX:
                    _PROPERTIES.clear()
                _PROPERTIES[text] = found
        props[key] = found
    write_only = {key: [ptr for _, ptr, sub, _ in found if sub.get("writeOnly") is True] for key, found in props.items()}
    return props, write_only


def _compile_schemas(t: ToolDecl, at: tuple, col: Collector, write_only: dict[str, list[str]],
                     texts: dict[str, bytes | None]) -> dict[str, Any]:
    """The input and output schemas meta-validated and compiled (None where absent or wrong);
    ``write_only``: each schema's ``writeOnly`` pointers (a validator masks values when any);
    ``texts``: each schema's JSON text (``_json_text``)."""
    validators: dict[str, Any] = {}
    for key in _SCHEMA_KEYS:
        schema = getattr(t, key)
        validators[key] = None
        if schema is None:
            continue
        found, validator, refused = _schema_outcome(schema, texts[key], bool(t.redact) or bool(write_only[key]))
        for spath, code, message, hint in found:
            if code == "TL320":
                col.add(code, f"{key} is not a valid JSON Schema: {message}", at + (key,) + spath,
                        hint or "see https://json-schema.org/draft/2020-12 for the keyword's form")
            else:
                col.add(code, message, at + (key,) + spath, "use a local reference such as '#/$defs/name'")
        if refused is not None:
            col.add("TL320", f"{key} does not compile: {refused}", at + (key,), "fix the keyword the message names")
        validators[key] = validator
    return validators


#: what checking and compiling a schema gave, by the schema's JSON text (``_json_text``) and
#: whether the validator masks values: the tools of a registry often share a schema
#: (``{type: object}``, one output shape), and a compiled validator is immutable, so each
#: distinct schema is meta-validated, reference-checked and compiled once. Bounded: cleared
#: when full, so a long-lived process reloading registries does not keep every schema it saw.
_OUTCOMES: dict[tuple[bytes, bool], tuple[tuple[tuple[Any, str, str, str], ...], Any, str | None]] = {}
_OUTCOMES_MAX = 1024


def _schema_outcome(schema: Any, text: bytes | None,
                    mask: bool) -> tuple[tuple[tuple[Any, str, str, str], ...], Any, str | None]:
    """(the schema's findings as (path in it, code, message, hint), its validator or None, why it
    does not compile or None); ``text``: its JSON text (``_json_text``)."""
    memo = (text, mask) if text is not None else None
    if memo is not None and (hit := _OUTCOMES.get(memo)) is not None:
        return hit
    found = tuple((spath, "TL320", message, hint) for spath, message, hint in schemas.meta_errors(schema))
    found += tuple((spath, code, message, "") for spath, code, message in schemas.check_refs(schema))
    validator, refused = None, None
    if not found:
        try:
            validator = schemas.compile_validator(schema, mask=mask)
        except Exception as exc:  # noqa: BLE001 - the validator library's own errors
            refused = clip((str(exc).splitlines() or [type(exc).__name__])[0])
    outcome = (found, validator, refused)
    if memo is not None:
        if len(_OUTCOMES) >= _OUTCOMES_MAX:
            _OUTCOMES.clear()
        _OUTCOMES[memo] = outcome
    return outcome


def _check_redaction(t: ToolDecl, at: tuple, col: Collector,
                     props: dict[str, tuple[tuple[str, str, dict, tuple], ...]],
                     write_only: dict[str, list[str]]) -> list[str]:
    """The tool's redaction pointers (``redact`` and ``writeOnly`` properties), checked; ``props``:
    each schema's properties (``schemas.iter_properties_at``), ``write_only`` its ``writeOnly`` pointers."""
    redact = list(t.redact)
    for i, ptr in enumerate(t.redact):
        if not schemas.is_json_pointer(ptr):
            fix = f"write {quoted('/' + ptr)}" if not ptr.startswith("/") else "escape '~' as '~0' and '/' inside a key as '~1'"
            col.add("TL340", f"redact entry {quoted(ptr)} is not a JSON Pointer", at + ("redact", i), fix)
            continue
        if not (schemas.pointer_can_match(t.input_schema, ptr) or schemas.pointer_can_match(t.output_schema, ptr)):
            col.add("TL341", f"redact pointer {quoted(ptr)} can never match the input or output schema", at + ("redact", i),
                    "fix the pointer (e.g. to a declared property) or remove it", level="warning")
    covering = list(t.redact) + write_only["input_schema"] + write_only["output_schema"]
    for key in _SCHEMA_KEYS:
        for name, ptr, _sub, spath in props[key]:
            if schemas.looks_secret(name) and not any(schemas.pointer_covers(c, ptr) for c in covering):
                col.add("TL342", f"property {quoted(name)} of {key} looks like a secret but is not redacted",
                        at + (key,) + spath, f"add {quoted(ptr)} to redact, or mark it writeOnly: true",
                        level="warning", at_key=True)
        redact.extend(p for p in write_only[key] if p not in redact)
    return redact


def _check_retry(tid: str, t: ToolDecl, at: tuple, col: Collector) -> bool:
    """Retry policy findings; returns whether the tool is an at-most-once write."""
    if t.retry is not None and t.retry.max_backoff_s is not None and t.retry.max_backoff_s < t.retry.backoff_s:
        col.add("TL351", f"retry.max_backoff_s ({t.retry.max_backoff_s}) is below retry.backoff_s ({t.retry.backoff_s})",
                at + ("retry", "max_backoff_s"), "raise max_backoff_s or lower backoff_s")
    if t.retry is not None and t.retry.max_attempts > 1 and not t.retry.on:
        col.add("TL351", f"retry.max_attempts is {t.retry.max_attempts} but retry.on is empty, so nothing is ever retried",
                at + ("retry", "on"), "list what to retry, e.g. on: [timeout, error], or set max_attempts: 1")
    writes_once = t.effect in ("write", "destructive") and not t.idempotent
    if writes_once and t.retry is not None and "on" in t.retry.model_fields_set and "timeout" in t.retry.on:
        col.add("TL352", f"tool {quoted(tid)} has effect: {t.effect} and is not idempotent, so it is never retried "
                "after a timeout (its first attempt may still be running, or may already have written)",
                at + ("retry", "on", t.retry.on.index("timeout")),
                "remove timeout from retry.on, or set idempotent: true if running it twice is safe")
    return writes_once


def _compile_gate(tid: str, t: ToolDecl, at: tuple, col: Collector) -> Any:
    """The approval gate (or None), and the warning for a write nobody is asked about."""
    gate = None
    if t.approval == "required":
        from .approval import RequiredGate

        gate = RequiredGate()
    elif t.approval is not None:
        gate, err = compile_approval(t.approval.when)
        if err:
            col.add("TL350", err, at + ("approval", "when"), "write a CEL expression over 'args', e.g. args.amount > 200")
    if t.effect in ("write", "destructive") and t.approval is None and t.mcp is None:
        col.add("TL353", f"tool {quoted(tid)} has effect: {t.effect} and no approval gate: a model or a plan can"
                " run it with no person asked", at + ("effect",) if "effect" in t.model_fields_set else at,
                "add approval: {when: ...} or approval: required, or accept it with # toolloop: ignore[TL353]",
                level="warning", at_key=True)
    return gate


def _mcp_effect(tid: str, t: ToolDecl, at: tuple, col: Collector) -> tuple[str, bool, frozenset[str]]:
    """An MCP tool's server declaration checked (TL317), and its effect: the registry's; else,
    from a trusted server, its annotations (filled in at admission, ``contract/mcp.py``); else
    ``write`` (at most once) with a warning (TL316). Returns (effect, idempotent, what the
    server's annotations decide)."""
    m = t.mcp
    assert m is not None
    from .mcp import check_declaration

    check_declaration(tid, m, at + ("mcp",), col)
    given = t.model_fields_set
    if "effect" in given:
        return t.effect, t.idempotent, frozenset()
    if m.trusted:
        return "write", t.idempotent, frozenset({"effect"} | ({"idempotent"} if "idempotent" not in given else set()))
    col.add("TL316", f"the effect of MCP tool {quoted(tid)} is unknown (its server is not trusted), so it is treated as"
                     " 'write': run at most once, never retried after a timeout", at, "set effect: read, write or"
            " destructive on the tool, or trusted: true on its mcp block to take the server's annotations",
            level="warning", at_key=True)
    return "write", t.idempotent, frozenset()

