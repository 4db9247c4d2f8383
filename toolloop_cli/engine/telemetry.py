"""OpenTelemetry traces of a run, following the GenAI semantic conventions.

Active only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set
(and neither ``OTEL_SDK_DISABLED=true`` nor ``OTEL_TRACES_EXPORTER=none`` says otherwise); without
them nothing of OpenTelemetry is imported. Everything else comes from the standard ``OTEL_*``
variables, read by the SDK and the OTLP exporter themselves (headers, timeout, sampler, batch
sizes, resource attributes); ``OTEL_EXPORTER_OTLP_PROTOCOL`` (or ``..._TRACES_PROTOCOL``) picks
``http/protobuf`` (the default) or ``grpc``.

One trace per run session:

- ``invoke_agent``: the run, from its start to its summary;
- ``execute_tool {tool}``: one per receipt committed in the session, calls that never ran included
  (denied, skipped, duplicate, budget_exceeded, interrupted), timed from the receipt;
- ``chat {model}``: one per model request (a routed run), with the provider's name and the token
  usage; a request that got no answer (its retries spent, or the loop's deadline passed) ends in
  error, with ``error.type``.

Approval answers (on the call's span, from its receipt), supervisor, guardrail and decision
records (on the run's span) are span events; the run's labels are attributes of every span. Spans are built only from
what receipts and records carry, which is already redacted: no argument, result or answer text
is ever exported. A failure inside telemetry turns it off for the rest of the run with one
warning; it never fails the run.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from typing import Any, Callable, Mapping

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
INSTALL_LINE = "pip install 'toolloop-cli[otel]'"
_MAX_TEXT = 200  # characters of an error message or a reason kept in a span


def wanted(env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(env.get(v, "").strip() for v in ENDPOINT_VARS)


def protocol(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    value = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    return value.strip().lower()


def missing_extra() -> str | None:
    """The install line when traces are asked for and the extra is not installed, else None."""
    if not wanted():
        return None
    import importlib.util

    for module in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"):
        try:
            if importlib.util.find_spec(module) is None:
                return INSTALL_LINE
        except ModuleNotFoundError:
            return INSTALL_LINE
    return None


def open_telemetry(*, run_id: str, mode: str, subagent: str | None, labels: Mapping[str, str],
                   warn: Callable[[str], None] | None = None, env: Mapping[str, str] | None = None,
                   batch_id: str | None = None) -> RunTelemetry | None:
    """The run's telemetry, or None when the environment does not ask for it (or cannot have it:
    then ``warn`` says why, once)."""
    if not wanted(env):
        return None
    say = warn or (lambda _text: None)
    try:
        exporter = _exporter(protocol(env), say)
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        say(f"OTEL_EXPORTER_OTLP_ENDPOINT is set, but OpenTelemetry is not installed, so no trace is exported:"
            f" {INSTALL_LINE}")
        return None
    env = os.environ if env is None else env
    attributes: dict[str, Any] = {}
    if not env.get("OTEL_SERVICE_NAME") and "service.name=" not in env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        attributes["service.name"] = "toolloop"
    version = _version()
    if version:
        attributes["service.version"] = version
    _quiet_sdk_logs(say)
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return RunTelemetry(provider, run_id=run_id, mode=mode, subagent=subagent, labels=labels, warn=say,
                        batch_id=batch_id)


def _quiet_sdk_logs(say: Callable[[str], None]) -> None:
    """The SDK and the exporter log each failed export (with tracebacks at times): one line on the
    run's warning channel instead, the first time."""
    import logging

    class _Once(logging.Handler):
        said = False

        def emit(self, record: logging.LogRecord) -> None:
            if not self.said:
                self.said = True
                say(f"telemetry: spans may not reach the collector: {_short(record.getMessage())}")

    logger = logging.getLogger("opentelemetry")
    for old in [h for h in logger.handlers if type(h).__name__ == "_Once"]:
        logger.removeHandler(old)
    handler = _Once(logging.WARNING)
    logger.addHandler(handler)
    logger.propagate = False


def _exporter(proto: str, say: Callable[[str], None]) -> Any:
    if proto == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        if proto != "http/protobuf":
            say(f"OTEL_EXPORTER_OTLP_PROTOCOL '{proto[:40]}' is not supported; exporting with http/protobuf")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter()


def _version() -> str | None:
    try:
        from importlib.metadata import version

        return version("toolloop-cli")
    except Exception:  # noqa: BLE001 - not installed as a distribution (a source tree)
        try:
            from importlib.metadata import version

            return version("toolloop")
        except Exception:  # noqa: BLE001
            return None


def _ns(rfc3339: str | None) -> int | None:
    if rfc3339 is None:
        return None
    try:
        return int(datetime.fromisoformat(rfc3339).timestamp() * 1_000_000) * 1000
    except ValueError:
        return None


def _short(text: Any) -> str:
    text = str(text)
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "…"


class RunTelemetry:
    """The spans of one run session. Every hook is called on the engine's thread."""

    def __init__(self, provider: Any, *, run_id: str, mode: str, subagent: str | None, labels: Mapping[str, str],
                 warn: Callable[[str], None], batch_id: str | None = None):
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self._trace, self._kind, self._status, self._code = trace, SpanKind, Status, StatusCode
        self.provider = provider
        self.tracer = provider.get_tracer("toolloop")
        self.warn = warn
        self.failed = False
        self.run_id = run_id
        self.labels = {f"toolloop.label.{k}": str(v) for k, v in labels.items()}
        self.root = self.tracer.start_span("invoke_agent", kind=SpanKind.INTERNAL, attributes={
            "gen_ai.operation.name": "invoke_agent",
            **({"gen_ai.agent.name": subagent} if subagent else {}),
            "toolloop.run_id": run_id,
            "toolloop.mode": mode,
            **({"toolloop.parallel_batch_id": batch_id} if batch_id else {}),
            **self.labels,
        })
        self.parent = trace.set_span_in_context(self.root)

    def _guard(self, hook: Callable[..., None], *args: Any) -> None:
        if self.failed:
            return
        try:
            hook(*args)
        except Exception as exc:  # noqa: BLE001 - telemetry must never fail a run
            self.failed = True
            self.warn(f"telemetry stopped for this run: {type(exc).__name__}: {_short(exc)}")

    # -- hooks -------------------------------------------------------------------------------

    def receipt(self, receipt: Any) -> None:
        """A receipt committed in this session: its ``execute_tool`` span."""
        self._guard(self._receipt, receipt)

    def record(self, rec: dict) -> None:
        """A decision, supervisor or guardrail record: an event of the run's span."""
        self._guard(self._record, rec)

    def chat(self, answer: dict, request_model: str, started_ns: int, provider: str | None = None,
             error: tuple[str, str] | None = None) -> None:
        """A model request (a ``model_answer`` record, or for one that got no answer its n, role and
        duration with ``error`` = (kind, message)): its ``chat {model}`` span."""
        self._guard(self._chat, answer, request_model, started_ns, provider, error)

    def close(self, summary: dict) -> None:
        """End the run's span with its outcome and export what is left."""
        if not self.failed:
            try:
                self._close(summary)
            except Exception as exc:  # noqa: BLE001
                self.warn(f"telemetry could not end the run's trace: {type(exc).__name__}: {_short(exc)}")
        try:
            self.provider.shutdown()
        except Exception:  # noqa: BLE001 - the exporter already logged why
            pass

    # -- spans -------------------------------------------------------------------------------

    def _receipt(self, r: Any) -> None:
        end = time.time_ns()
        start = _ns(r.started_at)
        if start is not None:
            end = start + int(r.duration_ms * 1_000_000)
        else:
            start = end
        # the run's id, subagent and batch id are on the run's span (each attribute costs the SDK
        # a check and an encoding, per call)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": r.tool,
            "gen_ai.tool.call.id": r.receipt_id,
            "toolloop.receipt_id": r.receipt_id,
            "toolloop.status": r.status,
            "toolloop.seq": r.seq,
            "toolloop.attempts": r.attempts,
            "toolloop.cache": r.cache,
            **self.labels,
        }
        for key in ("item_key", "call_key", "parent_receipt_id", "iteration"):
            value = getattr(r, key)
            if value is not None:
                attributes[f"toolloop.{key}"] = value
        if r.abandoned:
            attributes["toolloop.abandoned"] = True
        if r.error is not None:
            attributes["error.type"] = r.error.get("kind") or r.status
        elif r.status != "ok":
            attributes["error.type"] = r.status
        span = self.tracer.start_span(f"execute_tool {r.tool}", context=self.parent, kind=self._kind.INTERNAL,
                                      attributes=attributes, start_time=start)
        answer = getattr(r, "approval", None)
        if answer:  # a gated call: who answered, how, and when
            span.add_event("toolloop.approval", {"toolloop.decision": str(answer.get("decision")),
                                                 "toolloop.by": str(answer.get("by"))},
                           timestamp=_ns(answer.get("at")))
        if r.status != "ok":
            why = r.error.get("message") if r.error else None
            span.set_status(self._status(self._code.ERROR, _short(why or r.status)))
        span.end(end_time=max(end, start))

    def _record(self, rec: dict) -> None:
        kind = rec.get("type")
        keep = {"supervisor": ("iteration", "rule", "action", "reason"),
                "guardrail": ("iteration", "guard", "tool", "action", "reason"),
                "decision": ("iteration", "action", "tool", "rejected", "model")}.get(kind)  # type: ignore[arg-type]
        if keep is None:
            return
        attrs = {f"toolloop.{k}": (_short(rec[k]) if k == "reason" else rec[k]) for k in keep if rec.get(k) is not None}
        self.root.add_event(f"toolloop.{kind}", attrs)

    def _chat(self, answer: dict, request_model: str, started_ns: int, provider: str | None,
              error: tuple[str, str] | None) -> None:
        model = request_model or answer.get("model") or "model"
        end = started_ns + int((answer.get("duration_ms") or 0.0) * 1_000_000)
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            **({"gen_ai.provider.name": provider} if provider else {}),
            "gen_ai.request.model": model,
            "toolloop.run_id": self.run_id,
            "toolloop.role": answer.get("role") or "",
            "toolloop.model_answer": int(answer.get("n") or 0),
            **self.labels,
        }
        if error is None:
            attrs.update({"gen_ai.response.model": answer.get("model") or model,
                          "gen_ai.usage.input_tokens": int(answer.get("input_tokens") or 0),
                          "gen_ai.usage.output_tokens": int(answer.get("output_tokens") or 0)})
        else:
            attrs["error.type"] = error[0]
        span = self.tracer.start_span(f"chat {model}", context=self.parent, kind=self._kind.CLIENT, start_time=started_ns,
                                      attributes=attrs)
        if error is not None:
            span.set_status(self._status(self._code.ERROR, _short(error[1])))
        span.end(end_time=max(end, started_ns))

    def _close(self, summary: dict) -> None:
        status = summary.get("status")
        attrs: dict[str, Any] = {"toolloop.status": status}
        if summary.get("outcome") is not None:
            attrs["toolloop.outcome"] = summary["outcome"]
        if summary.get("chain_sha256"):
            attrs["toolloop.chain_sha256"] = summary["chain_sha256"]
        for name, n in (summary.get("counts") or {}).items():
            if n:
                attrs[f"toolloop.counts.{name}"] = n
        loop = summary.get("loop")
        if isinstance(loop, dict) and isinstance(loop.get("tokens"), dict):
            attrs["gen_ai.usage.input_tokens"] = loop["tokens"].get("input", 0)
            attrs["gen_ai.usage.output_tokens"] = loop["tokens"].get("output", 0)
        self.root.set_attributes(attrs)
        if status not in ("ok", "stopped"):
            self.root.set_status(self._status(self._code.ERROR, f"run {status}"))
        self.root.end()
