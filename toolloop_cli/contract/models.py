"""Declaration types for the registry file. Every mapping is closed."""

# no `from __future__ import annotations`: pydantic would compile every field's annotation
# from its text when the classes are built, a cost every command that loads a file pays
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, model_validator
from pydantic_core import PydanticCustomError

from .._plugins import plugins_back, plugins_off

_plugins = plugins_off()  # the classes below are built without pydantic's plugin loader

Schema = Union[dict[str, Any], StrictBool]
PosFloat = Annotated[float, Field(gt=0)]


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RetryDecl(Closed):
    max_attempts: Annotated[int, Field(ge=1, le=100)] = 1
    backoff_s: Annotated[float, Field(ge=0)] = 0.0
    max_backoff_s: Optional[Annotated[float, Field(ge=0)]] = None
    on: list[Literal["timeout", "error"]] = ["timeout", "error"]


class ConcurrencyDecl(Closed):
    max_in_flight: Optional[Annotated[int, Field(ge=1)]] = None
    per_second: Optional[PosFloat] = None


class ApprovalDecl(Closed):
    when: StrictStr


class ClientCredentialsDecl(Closed):
    """The OAuth client-credentials grant for an MCP server over HTTP: the client id and secret
    are read from the named environment variables (the secret's value, and every token it
    yields, are secrets); without ``token_url`` the token endpoint is discovered from the server."""

    token_url: Optional[StrictStr] = None
    client_id_env: StrictStr
    client_secret_env: StrictStr
    scope: Optional[StrictStr] = None


class McpAuthDecl(Closed):
    client_credentials: ClientCredentialsDecl


class McpDecl(Closed):
    """An MCP server: over stdio (``command``, ``env``: literal values, ``pass_env``: names of
    variables handed through from toolloop's environment, their values secrets) or Streamable HTTP
    (``url``, ``headers_env``: header name -> the environment variable holding its value, ``auth``:
    how it is authenticated); exactly one of the two."""

    command: Optional[Annotated[list[StrictStr], Field(min_length=1)]] = None
    env: dict[str, StrictStr] = {}
    pass_env: list[StrictStr] = []
    url: Optional[StrictStr] = None
    headers_env: dict[str, StrictStr] = {}
    allow: Annotated[list[StrictStr], Field(min_length=1)]
    trusted: StrictBool = False  # take the server's tool annotations as the default effect
    auth: Optional[McpAuthDecl] = None  # with url: OAuth client credentials (contract/mcp_auth.py)


class SandboxDecl(Closed):
    """How a tool with ``isolation: sandbox`` is confined."""

    network: Literal["none", "host"] = "none"
    writable: list[StrictStr] = []  # folders relative to app_root, which must exist
    env: list[StrictStr] = []  # variable names let in beside PATH and HOME
    required: StrictBool = True  # false: run as isolation: process where no sandbox can be made


class GraphDecl(Closed):
    status_field: StrictStr
    continue_statuses: list[StrictStr]
    stop_statuses: list[StrictStr]


class DiagnosisDecl(Closed):
    ready_field: StrictStr
    reason_code_field: StrictStr
    failure_kind_field: StrictStr
    facts_field: StrictStr
    fields: list[StrictStr]


class EnvelopeDecl(Closed):
    version: Literal[1]
    role: StrictStr
    graph: GraphDecl
    diagnosis: Optional[DiagnosisDecl] = None
    handoff_fields: list[StrictStr] = []


class ToolDecl(Closed):
    callable: Optional[StrictStr] = None
    mcp: Optional[McpDecl] = None
    plan: Optional[StrictStr] = None  # a routed plan run as a child run; relative to the registry file
    description: Optional[StrictStr] = None
    input_schema: Optional[Schema] = None
    output_schema: Optional[Schema] = None
    cacheable: StrictBool = False
    timeout_s: Optional[PosFloat] = None
    retry: Optional[RetryDecl] = None
    isolation: Literal["thread", "process", "sandbox"] = "thread"
    sandbox: Optional[SandboxDecl] = None
    concurrency: Optional[ConcurrencyDecl] = None
    max_calls: Optional[Annotated[int, Field(ge=0)]] = None
    effect: Literal["read", "write", "destructive"] = "read"
    idempotent: StrictBool = False
    redact: list[StrictStr] = []
    approval: Optional[Union[ApprovalDecl, Literal["required"]]] = None  # "required": every call is gated
    dispatch: list[StrictStr] = []
    control_envelope: Optional[EnvelopeDecl] = None
    #: whether the tool's results are written by someone outside (web pages, mail, tickets): an
    #: untrusted result shown to a routed run's model taints the run (default: trusted, except an
    #: MCP tool's, which is untrusted unless its server is ``trusted: true``)
    output_trust: Optional[Literal["trusted", "untrusted"]] = None


def _bad_address(url: str) -> bool:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is not a number from 0 to 65535
        return True
    return not parts.hostname or port == 0


class NotifyDecl(Closed):
    """Who is told when a run needs a person or ends (``notify``): a command given the event as
    JSON on standard input, or a URL it is POSTed to (``headers_env``: header name -> the
    environment variable holding its value, a secret); ``on`` the events that are sent."""

    command: Optional[Annotated[list[StrictStr], Field(min_length=1)]] = None
    url: Optional[StrictStr] = None
    headers_env: dict[str, StrictStr] = {}
    on: Annotated[list[Literal["approval_request", "paused", "failed", "finished"]], Field(min_length=1)] = [
        "approval_request", "paused"]

    @model_validator(mode="after")
    def _one_target(self) -> "NotifyDecl":
        if (self.command is None) == (self.url is None):
            raise PydanticCustomError("notify", "needs exactly one of 'command' (a program given the event on"
                                                " standard input) or 'url' (the event is POSTed to it)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise PydanticCustomError("notify", "'url' must be an http:// or https:// address")
        if self.url is not None and _bad_address(self.url):
            raise PydanticCustomError("notify", "'url' needs a host and, if it names a port, one from 1 to 65535")
        if self.command is not None and self.headers_env:
            raise PydanticCustomError("notify", "'headers_env' goes with 'url', not with 'command'")
        return self


class RunnerDefaults(Closed):
    allowed_tools: Optional[list[StrictStr]] = None
    max_calls: Optional[Annotated[int, Field(ge=0)]] = None
    tool_timeout_s: Optional[PosFloat] = None
    max_depth: Optional[Annotated[int, Field(ge=0)]] = None  # how deep child plans may nest; default 2
    notify: Optional[NotifyDecl] = None  # who is told when a run needs a person or ends (a plan's own wins)


class SubagentDecl(Closed):
    tools: dict[str, ToolDecl]
    runner_defaults: RunnerDefaults = RunnerDefaults()


class RegistryDecl(Closed):
    """The registry file: an App's tools, grouped by subagent."""

    version: Literal[1]
    app_root: Optional[StrictStr] = None
    evidence: Optional[StrictStr] = None
    subagents: dict[str, SubagentDecl]


plugins_back(_plugins)
