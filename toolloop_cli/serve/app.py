"""The server's routes behind the token guard: the page, its static files and the JSON API."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from . import api, pages
from .auth import Guard, Users
from .journal import Journal


def build_app(journal: Journal, users: Users) -> Starlette:
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
    app = Starlette(routes=routes, middleware=[Middleware(Guard, users=users)])
    app.state.journal = journal
    return app
