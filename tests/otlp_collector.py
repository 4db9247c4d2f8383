"""A loopback OTLP collector for tests and benchmarks: receives what an OTLP exporter sends over
HTTP (``/v1/traces``, protobuf) or gRPC on 127.0.0.1, decodes it with ``opentelemetry-proto``,
and keeps the raw bodies and the spans as plain dicts."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind)


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[dict[str, Any]]
    status_code: int
    status_message: str
    resource: dict[str, Any]


@dataclass
class Collector:
    """Spans received, in arrival order; ``bodies`` are the raw request bodies (after gunzip)."""

    spans: list[Span] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    endpoint: str = ""
    _stop: Any = None

    def take(self, raw: bytes) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        request = ExportTraceServiceRequest()
        request.ParseFromString(raw)
        with self.lock:
            self.bodies.append(raw)
            for rs in request.resource_spans:
                resource = _attrs(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.spans.append(Span(
                            name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(), kind=s.kind,
                            start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano,
                            attributes=_attrs(s.attributes),
                            events=[{"name": e.name, "attributes": _attrs(e.attributes), "time_ns": e.time_unix_nano}
                                    for e in s.events],
                            status_code=s.status.code, status_message=s.status.message, resource=resource))

    def named(self, prefix: str) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.name == prefix or s.name.startswith(prefix + " ")]

    def clear(self) -> None:
        with self.lock:
            self.spans.clear()
            self.bodies.clear()

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()


def start_http() -> Collector:
    """An OTLP/HTTP (protobuf) collector; ``endpoint`` is its base address."""
    collector = Collector()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            body = str(len(collector.spans)).encode()  # /count: spans received so far
            self.send_response(200 if self.path == "/count" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                raw = gzip.decompress(raw)
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            collector.take(raw)
            body = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    collector.endpoint = f"http://127.0.0.1:{server.server_address[1]}"

    def stop() -> None:
        server.shutdown()
        server.server_close()

    collector._stop = stop
    return collector


def start_grpc() -> Collector:
    """An OTLP/gRPC collector; ``endpoint`` is its address."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    collector = Collector()

    class Service(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - the service's name
            collector.take(request.SerializeToString())
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    collector.endpoint = f"http://127.0.0.1:{port}"
    collector._stop = lambda: server.stop(None)
    return collector


if __name__ == "__main__":  # a collector in its own process: prints its endpoint, serves until stdin closes
    import sys

    served = start_http()
    print(served.endpoint, flush=True)
    sys.stdin.read()
    served.stop()
