"""The JSON API: runs, a run's records (or their Server-Sent Events), pending approval requests,
answers, steer, abort and resume. Errors are ``{"error": "..."}`` with the status that says what
happened (400 a malformed request, 404 nothing there, 409 answered already or running, 422
arguments that fail the input schema)."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .. import _json
from .journal import Journal, Refused

#: the largest request body taken (an answer with edited arguments)
MAX_BODY = 1024 * 1024
#: how long ``resume`` waits for the background resume to reopen the run before answering
RESUME_START_S = 30.0


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return _json.dumps(content)


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers={"cache-control": "no-store"})


def ok(content: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(content, status_code=status, headers={"cache-control": "no-store"})


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    import anyio

    return await anyio.to_thread.run_sync(partial(fn, *args))


def journal_of(request: Request) -> Journal:
    return request.app.state.journal


async def body_of(request: Request) -> Any:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise Refused(413, f"the request body is larger than {MAX_BODY} bytes")
    if not raw.strip():
        return None
    try:
        return _json.loads(raw)
    except _json.JSONDecodeError as exc:
        from .._text import clip

        raise Refused(400, f"the request body is not JSON: {clip(str(exc))}") from None


def refusals(handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
    """A ``Refused`` raised by the journal becomes its JSON error response."""

    async def handle(request: Request) -> Response:
        try:
            return await handler(request)
        except Refused as exc:
            return error(exc.status, exc.message)

    handle.__name__ = handler.__name__
    return handle


@refusals
async def runs(request: Request) -> Response:
    return ok(await in_thread(journal_of(request).runs))


@refusals
async def run(request: Request) -> Response:
    return ok(await in_thread(journal_of(request).run, request.path_params["run_id"]))


@refusals
async def records(request: Request) -> Response:
    journal = journal_of(request)
    run_id = request.path_params["run_id"]
    if "text/event-stream" not in request.headers.get("accept", ""):
        return ok(await in_thread(journal.records, run_id))
    from .sse import follow

    def first() -> tuple:
        version = journal.changes()  # before reading: a commit in between is seen on the next look
        record, recs, summary, live = journal.view(run_id)
        return record["run_id"], (version, recs, summary, live)

    rid, snapshot = await in_thread(first)
    return StreamingResponse(follow(journal, rid, snapshot), media_type="text/event-stream",
                             headers={"cache-control": "no-store", "x-accel-buffering": "no"})


@refusals
async def approvals(request: Request) -> Response:
    return ok(await in_thread(journal_of(request).approvals, request.query_params.get("run") or None))


@refusals
async def answer(request: Request) -> Response:
    body = await body_of(request)
    user = request.scope["state"]["user"]
    result = await in_thread(journal_of(request).answer, request.path_params["run_id"],
                             request.query_params.get("item") or None, request.path_params["call_key"], body, user.name)
    return ok(result)


def control(kind: str) -> Callable[[Request], Any]:
    @refusals
    async def handle(request: Request) -> Response:
        body = await body_of(request)
        return ok(await in_thread(journal_of(request).control, request.path_params["run_id"], kind, body))

    handle.__name__ = kind
    return handle


@refusals
async def resume(request: Request) -> Response:
    """202 once the background resume has reopened the run (or has already ended), so
    that following the run's records from then on sees the resumed run."""
    import anyio

    journal = journal_of(request)
    body = await body_of(request)
    if body is not None and (not isinstance(body, dict) or not isinstance(body.get("raise", {}), dict)):
        raise Refused(400, 'resume takes no body, or {"raise": {NAME: VALUE}} to raise budgets of a run a budget paused')
    raises = (body or {}).get("raise") or {}
    user = request.scope["state"]["user"]
    rid, proc = await in_thread(journal.start_resume, request.path_params["run_id"], raises, user.name)
    with anyio.move_on_after(RESUME_START_S):
        while not await in_thread(journal.resume_under_way, rid, proc):
            await anyio.sleep(0.05)
    return ok({"run_id": rid, "pid": proc.pid, "exit_code": proc.poll()}, status=202)
