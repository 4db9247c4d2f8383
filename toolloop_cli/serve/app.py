"""The server's routes behind the token guard: the page, its static files and the JSON API."""

from __future__ import annotations

from typing import Any, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import StateError
from . import api, pages
from .auth import Guard, Users
from .journal import Journal


def build_app(journal: Journal, users: Users) -> Any:
    """The ASGI app over ``journal``; every request passes ``Guard`` first."""
    routes = [
        Route("/", pages.runs_page),
        Route("/inbox", pages.inbox_page),
        Route("/runs/{run_id}", pages.run_page),
        Route("/api/runs", api.runs),
        Route("/api/runs/{run_id}", api.run),
        Route("/api/runs/{run_id}/records", api.records),
        Route("/api/runs/{run_id}/steer", api.control("steer"), methods=["POST"]),
        Route("/api/runs/{run_id}/abort", api.control("abort"), methods=["POST"]),
        Route("/api/runs/{run_id}/resume", api.resume, methods=["POST"]),
        Route("/api/approvals", api.approvals),
        Route("/api/approvals/{run_id}/{call_key:path}", api.answer, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=str(pages.HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(Guard, users=users)],
                    exception_handlers={404: _not_found, 405: _not_allowed, StateError: _damaged})
    app.state.journal = journal
    journal.hold_tokens([user.token for user in users.users])
    return _Bugs(app, journal.log)


class _Bugs:
    """An exception that escapes a request is a bug in toolloop: the client has had its 500, and
    the log gets one line naming it (the traceback with ``TOOLLOOP_DEBUG=1``)."""

    def __init__(self, app: Any, log: Callable[[str], None]):
        self.app = app
        self.log = log

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        except Exception as exc:  # noqa: BLE001 - the one place a bug in a request is caught
            import os

            from .._text import excerpt

            if os.environ.get("TOOLLOOP_DEBUG", "") not in ("", "0"):
                import traceback

                traceback.print_exception(exc)
            self.log(f"internal error: {type(exc).__name__} while serving {scope.get('method', '')}"
                     f" {excerpt(scope.get('path', ''))} (a bug in toolloop; TOOLLOOP_DEBUG=1 prints the traceback)")


async def _not_found(request: Request, _exc: Exception) -> Response:
    if request.url.path.startswith("/api/"):
        return api.error(404, "no such API path: see GET /api/runs, /api/runs/RUN_ID, /api/runs/RUN_ID/records,"
                              " /api/approvals")
    return pages.render(request, "refused.html", status=404, code=404, why="There is no such page.", how="See the list of runs.",
                        title="Not found")


async def _damaged(request: Request, exc: Exception) -> Response:
    """A damaged state database: the message the command line gives, with a 500, for any read."""
    request.app.state.journal.log(f"error: {exc}")
    if request.url.path.startswith("/api/"):
        return api.error(500, str(exc))
    return pages.render(request, "refused.html", status=500, code=500, why=str(exc),
                        how="Restore the state database from a copy, or serve another --state-dir.",
                        title="Damaged state database")


async def _not_allowed(request: Request, _exc: Exception) -> Response:
    if request.url.path.startswith("/api/"):
        return api.error(405, f"{request.method} is not allowed here")
    return pages.render(request, "refused.html", status=405, code=405, why=f"{request.method} is not allowed here.",
                        how="See the list of runs.", title="Not allowed")
