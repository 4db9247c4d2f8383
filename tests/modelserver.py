"""A scripted model server on 127.0.0.1 speaking the two protocols toolloop's providers use:
``POST /v1/chat/completions`` (OpenAI) and ``POST /v1/messages`` (Anthropic).

Tests queue replies (text and usage, an HTTP status, a Retry-After header, a raw body, a hold
that keeps the reply back until the test releases it, or a handler function) and read back
every request the server received (headers and JSON body). Both endpoints take replies from one
queue, in order; an empty queue answers 500 so a test that asks too often fails loudly.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    raw: bytes
    json: Any


@dataclass
class Reply:
    text: str = '{"action": "final", "reason": "done"}'
    input_tokens: int = 10
    output_tokens: int = 5
    status: int = 200
    retry_after: str | None = None
    model: str = "loopback-model"
    #: sent as the body instead of the protocol's reply (bytes as they are, anything else as JSON)
    body: Any = None
    #: extra response headers
    headers: dict[str, str] = field(default_factory=dict)
    #: the content-type header sent
    content_type: str = "application/json"
    #: the reply waits until this event is set (the server releases every hold when it stops)
    hold: threading.Event | None = None
    #: seconds to wait before replying (prefer ``hold`` in tests)
    delay: float = 0.0
    #: called with the request; returns the Reply to send
    handler: Callable[[Recorded], "Reply"] | None = None


def openai_body(reply: Reply) -> dict:
    if reply.status >= 400:
        return {"error": {"message": reply.text, "type": "scripted_error", "code": reply.status}}
    return {
        "id": "chatcmpl-loopback", "object": "chat.completion", "model": reply.model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply.text}}],
        "usage": {"prompt_tokens": reply.input_tokens, "completion_tokens": reply.output_tokens,
                  "total_tokens": reply.input_tokens + reply.output_tokens},
    }


def anthropic_body(reply: Reply) -> dict:
    if reply.status >= 400:
        return {"type": "error", "error": {"type": "scripted_error", "message": reply.text}}
    return {
        "id": "msg_loopback", "type": "message", "role": "assistant", "model": reply.model,
        "content": [{"type": "text", "text": reply.text}], "stop_reason": "end_turn",
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
    }


BODIES = {"/v1/chat/completions": openai_body, "/v1/messages": anthropic_body}


class ModelServer:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[Reply] = []
        self.requests: list[Recorded] = []
        self._holds: list[threading.Event] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting ------------------------------------------------------------------------

    def script(self, *replies: Reply | str) -> None:
        """Queue replies (a string is a 200 reply with that text)."""
        with self._lock:
            for r in replies:
                reply = Reply(text=r) if isinstance(r, str) else r
                if reply.hold is not None:
                    self._holds.append(reply.hold)
                self._queue.append(reply)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def url(self) -> str:
        assert self._httpd is not None, "the server is not running"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def openai_base(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base(self) -> str:
        return self.url

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> ModelServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                rec = Recorded("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, raw, body)
                with server._lock:
                    server.requests.append(rec)
                    reply = server._queue.pop(0) if server._queue else None
                if reply is None:
                    reply = Reply(text="no scripted reply left", status=500)
                if reply.handler is not None:
                    reply = reply.handler(rec)
                if reply.hold is not None:
                    reply.hold.wait()
                if reply.delay:
                    time.sleep(reply.delay)
                render = BODIES.get(self.path)
                if render is None:
                    payload, status = b'{"error": {"message": "no such endpoint"}}', 404
                elif isinstance(reply.body, bytes):
                    payload, status = reply.body, reply.status
                else:
                    payload = json.dumps(reply.body if reply.body is not None else render(reply)).encode()
                    status = reply.status
                try:
                    self.send_response(status)
                    if not any(k.lower() == "content-type" for k in reply.headers):
                        self.send_header("content-type", reply.content_type)
                    self.send_header("content-length", str(len(payload)))
                    if reply.retry_after is not None:
                        self.send_header("retry-after", reply.retry_after)
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
                    pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="modelserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            for hold in self._holds:
                hold.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
