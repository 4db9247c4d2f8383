"""Findings: errors are data with a place. Rendering lives in ``toolloop_cli.render.lint``."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Iterable

from .._text import excerpt
from .source import Path, SourceMap

# Stable finding codes. The table in docs/findings.md is generated from this mapping and a
# test keeps the two in step. Codes are never reused for another meaning.
CODES: dict[str, str] = {
    # loading (file level)
    "TL101": "file cannot be read",
    "TL102": "YAML syntax error",
    "TL103": "duplicate key",
    "TL104": "document too large after alias expansion (alias bomb)",
    "TL105": "tag or value not allowed in safe YAML",
    "TL106": "document is empty, not a mapping, or not the kind of file expected (neither a registry nor a plan, or a plan given as a registry)",
    # structure
    "TL201": "unknown key",
    "TL202": "required key missing",
    "TL203": "value has the wrong type or is out of range",
    "TL204": "unsupported version",
    "TL205": "key not used in this plan mode",
    # registry rules
    "TL301": "duplicate tool id",
    "TL302": "allowed_tools names an unknown tool",
    "TL303": "dispatch names an unknown tool",
    "TL304": "callable is not 'module:attribute'",
    "TL305": "callable path has a private segment",
    "TL306": "callable module cannot be imported",
    "TL307": "callable attribute not found",
    "TL308": "callable target is not callable",
    "TL309": "a tool needs exactly one of callable, mcp or plan",
    "TL310": "no timeout for a tool",
    "TL311": "isolation: process on an async callable",
    "TL312": "app_root folder does not exist",
    "TL313": "MCP client not installed, or MCP server cannot be started or reached, or does not offer an allowed tool",
    "TL314": "async callable taken for trio calls a library built on asyncio",
    "TL315": "a plan tool's file is not a readable plan",
    "TL316": "MCP tool's effect is unknown (untrusted server, no effect in the registry): treated as write",
    "TL317": "mcp block needs exactly one of command or url (env and pass_env go with command, headers_env and auth with url), or its auth cannot be used safely",
    "TL318": "isolation: sandbox on a tool that is not a sync callable (an async callable, an MCP or plan tool)",
    "TL319": "sandbox block without isolation: sandbox, a writable folder missing or outside app_root, or an env entry that is not a variable name",
    "TL320": "schema is not a valid JSON Schema",
    "TL321": "$ref points outside the document",
    "TL322": "$ref does not resolve inside the document",
    "TL330": "control envelope does not compile",
    "TL340": "redact entry is not a JSON Pointer",
    "TL341": "redact pointer can never match the schema",
    "TL342": "secret-looking property is not redacted",
    "TL350": "approval expression does not compile",
    "TL351": "retry or concurrency policy is inconsistent",
    "TL352": "a write that is not idempotent is set to be retried after a timeout",
    "TL353": "a write or destructive tool has no approval gate",
    "TL360": "evidence hook does not resolve",
    "TL370": "registry differs from toolloop.lock",
    "TL371": "toolloop.lock missing or unreadable",
    "TL372": "MCP server's tool schemas changed since toolloop.lock was written",
    "TL380": "no sandbox can be made on this machine for an isolation: sandbox tool (no bwrap, or namespaces refused)",
    # plan admission
    "TL401": "unknown subagent",
    "TL402": "unknown tool",
    "TL403": "tool not in the allowlist",
    "TL404": "arguments fail the tool's input schema",
    "TL405": "duplicate item_key",
    "TL406": "duplicate call_key",
    "TL407": "plan exceeds the subagent's max_calls",
    "TL408": "plan exceeds a tool's max_calls",
    "TL409": "max_concurrency missing or below 1",
    "TL410": "routed plan: profile, provider or budget problem",
    "TL411": "routed plan: allowed_tools outside the subagent's allowlist",
    "TL412": "plan's registry cannot be found",
    "TL413": "lane payload cannot feed this call",
    "TL414": "lanes input line is not a lane",
    "TL415": "prompt file missing or empty",
    "TL416": "a file the plan names (instructions, judge prompt, replay fixture) is missing or empty",
    "TL417": "routed plan: context fails the plan's inputs schema",
    "TL418": "routed plan: outcome name reused or final_schema cannot hold 'outcome'",
    "TL419": "routed plan: route key is neither a declared nor an engine outcome",
    "TL420": "routed plan: supervisor rule or on_violation problem",
    "TL421": "replay fixture line is not a model answer",
    "TL422": "child plan rejected, not routed, carries its own context, or nests past max_depth",
    "TL423": "plan uses a tool whose sandbox cannot be made (none on this machine, or --executor ray)",
    # suite files (toolloop test)
    "TL501": "suite case's plan or fixture cannot be found",
    "TL502": "suite expectation or fault names a tool the plan's registry lacks",
    "TL503": "suite case key does not apply to its plan (a batch plan runs live; faults need a fixture)",
    "TL504": "suite case name used twice",
    "TL430": "routed plan: taint.on_write: allow with an untrusted tool and a write or destructive tool allowed",
}


# One line of "how to fix" per code: the findings table in docs/findings.md and the help of each
# SARIF rule. Every code in CODES has one (the artifact generator refuses to run otherwise).
FIXES: dict[str, str] = {
    "TL101": "Check the path and the file's permissions; the file must be readable UTF-8 text.",
    "TL102": "Fix the YAML at the reported line and column (indentation, quoting, a missing colon).",
    "TL103": ("Remove or rename the second occurrence of the key; YAML mappings need unique keys (a key"
              " written in a mapping may override one its `<<` merge brings in)."),
    "TL104": "Reduce the use of anchors and aliases; the expanded document must stay small.",
    "TL105": "Write plain YAML: no `!tags`, plain scalar keys, finite numbers, `<<` merging mappings only.",
    "TL106": "Make the file's top level a mapping (at least `version: 1`); pass the registry where a registry is expected and the plan where a plan is (`toolloop run PLAN`); `toolloop validate` tells them apart by their keys (`subagents` for a registry, `mode` and `subagent` for a plan).",
    "TL201": "Remove the key or fix its spelling (see the 'did you mean' hint); mappings are closed.",
    "TL202": "Add the missing key named in the message.",
    "TL203": "Give the value the type and range the message asks for.",
    "TL204": "Set `version: 1`, the only version today.",
    "TL205": "Remove the key, or change the plan's `mode` to one that uses it.",
    "TL301": "Give each tool of a subagent a unique id.",
    "TL302": "List only tools registered under the same subagent in `allowed_tools`, or register the tool.",
    "TL303": "List only registered tools in `dispatch`, or register the tool.",
    "TL304": "Write the callable as `package.module:attribute` (the attribute may be dotted).",
    "TL305": "Expose the callable under a public name: no module or attribute segment may start with `_`.",
    "TL306": "Make the module importable: check `app_root`, the module path and the module's own imports.",
    "TL307": "Fix the attribute name after the colon, or define it in the module.",
    "TL308": "Point `callable` at a function or another callable object, not at a plain value.",
    "TL309": "Give the tool exactly one of `callable`, `mcp` or `plan`.",
    "TL310": "Set `timeout_s` on the tool or `runner_defaults.tool_timeout_s` on its subagent.",
    "TL311": "Use `isolation: thread` for async callables, or make the callable synchronous.",
    "TL312": "Create the folder, or fix `app_root` (it is relative to the registry file).",
    "TL313": "Install the MCP client (`pip install 'toolloop-cli[mcp]'`), check that `mcp.command` starts the server (it must be on PATH), or that `mcp.url` answers with the headers from `mcp.headers_env` (each variable set) or the tokens of `mcp.auth` (its variables set, its token endpoint answering), and that every name in `allow` is one of the tools the server lists.",
    "TL315": "Point `plan` at a routed plan file, relative to the registry file.",
    "TL314": "Decorate the coroutine with `toolloop_cli.asyncio_tool` so it runs on asyncio; if the library does run on trio, set `fn.__toolloop_runtime__ = \"trio\"` to say so.",
    "TL316": "Set `effect` (read, write or destructive) on the MCP tool, or `trusted: true` on its `mcp` block to take the server's annotations; until then it runs at most once.",
    "TL317": "Give the `mcp` block exactly one of `command` (stdio, with `env` and `pass_env`) or `url` (Streamable HTTP, with `headers_env`); `pass_env` lists environment variable names, each once and not also in `env`; `auth` names variables (not values), sets no `Authorization` header of `headers_env` too, and sends credentials only over HTTPS or on loopback.",
    "TL318": "Remove `isolation: sandbox` from the tool; only a synchronous `callable` runs in a sandbox (make the callable sync if it must be confined).",
    "TL319": "Put `sandbox:` only on a tool with `isolation: sandbox`; list in `writable` existing folders below `app_root`, relative to it; list in `env` variable names (PATH and HOME are always set).",
    "TL320": "Fix the schema so it meta-validates against JSON Schema 2020-12; `{}` means open.",
    "TL321": "Replace the remote or file `$ref` with a local one (`#/$defs/...`); nothing is fetched.",
    "TL322": "Define the referenced `$defs` entry, or fix the JSON Pointer in `$ref`.",
    "TL330": "Fix the `control_envelope` block as the message says (pointers, statuses, handoff).",
    "TL340": "Write each `redact` entry as a JSON Pointer starting with `/`, e.g. `/headers/authorization`.",
    "TL341": "Fix the pointer so it names a property the input or output schema can hold, or drop it.",
    "TL342": "Add the property's pointer to `redact`, or mark the property `writeOnly: true`.",
    "TL350": "Fix the CEL expression in `approval.when`; it sees the call's arguments as `args`.",
    "TL351": "Make the policy consistent: positive attempts and rates, `backoff_s` <= `max_backoff_s`.",
    "TL353": "Gate the tool with `approval: {when: ...}` (a CEL expression over `args`) or `approval: required`; where no person needs to be asked, accept it with an inline `# toolloop: ignore[TL353]` or `--ignore TL353`.",
    "TL352": "Remove `timeout` from `retry.on`, or set `idempotent: true` if the tool can safely run twice (e.g. it passes `current_call().idempotency_key` to its backend).",
    "TL360": "Point the evidence hook at a public, importable callable.",
    "TL370": "Review the contract change, then run `toolloop lock REGISTRY` and commit toolloop.lock.",
    "TL371": "Run `toolloop lock REGISTRY` and commit the toolloop.lock it writes beside the registry.",
    "TL372": "Review what the MCP server changed in its tools, then run `toolloop lock REGISTRY` again and commit toolloop.lock.",
    "TL380": "Install bubblewrap (`apt-get install bubblewrap`) and allow user namespaces (`sysctl kernel.unprivileged_userns_clone=1`; on Ubuntu also `kernel.apparmor_restrict_unprivileged_userns=0`), or set `sandbox: {required: false}` to run the tool as `isolation: process`, unconfined.",
    "TL401": "Use a subagent id defined in the registry.",
    "TL402": "Use a tool id registered under the subagent (see `toolloop tools REGISTRY`).",
    "TL403": "Add the tool to the subagent's `runner_defaults.allowed_tools`, or call an allowed tool.",
    "TL404": "Fix the call's `args` so they validate against the tool's `input_schema`.",
    "TL405": "Give every lane a unique `item_key`.",
    "TL406": "Give every call a unique `call_key`.",
    "TL407": "Plan fewer calls, or raise the subagent's `runner_defaults.max_calls`.",
    "TL408": "Plan fewer calls of the tool, or raise its `max_calls`.",
    "TL409": "Set `max_concurrency` to 1 or more in the plan, or pass `--max-concurrency N`.",
    "TL410": "Fix the routed plan's profile, provider or budget as the message says.",
    "TL411": "Keep the routed plan's `allowed_tools` within the subagent's `allowed_tools`.",
    "TL412": "Set the plan's `registry` path (relative to the plan) or pass `--registry FILE`.",
    "TL413": "Make the lane's payload match what the call's arguments take from it.",
    "TL414": "Write one JSON object per line in the `--lanes` input, each a lane of the plan.",
    "TL415": "Reinstall toolloop; its packaged prompt files are missing or empty.",
    "TL416": "Create the file, or fix its path: paths in a plan are relative to the plan's folder.",
    "TL417": "Pass a `context` that validates against the plan's `inputs` schema.",
    "TL418": "Rename the outcome (the loop's own names are reserved), or let `final_schema` hold a string `outcome`.",
    "TL419": "Key `routes` by a declared outcome or one of the loop's outcomes.",
    "TL420": "Give each rule exactly its own fields, set `on_violation`, and a `steer_message` for steer.",
    "TL421": "Use the JSON Lines written by `toolloop runs export RUN_ID` as the fixture.",
    "TL422": "Fix the child plan (its own findings follow), make it `mode: routed` without `context:` (its parent supplies it), or raise the top plan's subagent `runner_defaults.max_depth`.",
    "TL423": "Make the sandbox possible here (see TL380: install bubblewrap, allow user namespaces), set `sandbox: {required: false}` on the tool, or run with `--executor local` instead of Ray.",
    "TL501": "Fix the path: a case's `plan` and `fixture` are relative to the suite file (record a missing fixture with `toolloop test SUITE --record`).",
    "TL502": "Name a tool of the plan's subagent (see `toolloop tools REGISTRY`) in `calls`, `never` and `faults`.",
    "TL503": "A batch (sequential or parallel) case runs live and is checked by `calls`, `never` and `max_tool_calls` only: remove the other keys, or point the case at a routed plan; give a case with `faults` a `fixture`.",
    "TL504": "Give every case of a suite a name of its own (`-k` and the run labels select cases by name).",
    "TL430": "Set `taint: {on_write: approve}` (the default: a person answers each write proposed after untrusted content) or `deny`, or keep untrusted tools and write tools out of the same `allowed_tools`.",
}


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding: where it is, what it is, how to fix it."""

    code: str
    message: str
    file: str
    line: int = 1
    col: int = 1
    path: str = ""
    hint: str = ""
    level: str = "error"  # error | warning

    @property
    def sort_key(self) -> tuple:
        return (self.file, self.line, self.col, self.code, self.message)

    def as_dict(self) -> dict:
        return {
            "code": self.code,
            "level": self.level,
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "path": self.path,
            "message": self.message,
            "hint": self.hint,
        }


def json_path(path: Path) -> str:
    """Render a data path as ``subagents.worker-a.tools[0].callable`` (keys dotted, indexes
    bracketed); each key is shown as an excerpt, control characters escaped."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + excerpt(str(part))
    return out


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


@dataclass
class Collector:
    """Gathers problems for one document, placing each through the document's source map."""

    smap: SourceMap
    problems: list[Problem] = field(default_factory=list)

    def add(
        self,
        code: str,
        message: str,
        path: Path = (),
        hint: str = "",
        level: str = "error",
        at_key: bool = False,
    ) -> None:
        line, col = self.smap.position(path, at_key=at_key)
        self.problems.append(
            Problem(code, message, self.smap.file, line, col, json_path(path), hint, level)
        )

    @property
    def has_errors(self) -> bool:
        return any(p.level == "error" for p in self.problems)


def not_a(kind: str, data: object, col: Collector, keys: Iterable[str], hint: str) -> bool:
    """A mapping none of whose top-level keys is one a ``kind`` has is some other file (a .env
    file, a password list): one finding for the whole file, quoting none of its content, rather
    than one per line. True when that is so."""
    known = set(keys)
    if not isinstance(data, dict) or any(k in known for k in data):
        return False
    col.add("TL106", f"this file is not a {kind}: none of its {len(data)} top-level keys is one a {kind} has", (), hint)
    return True
