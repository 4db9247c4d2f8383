"""The page for people: runs (live), one run's timeline and the approvals inbox. Rendered on the
server from the package's templates; one small script (``static/app.js``) sends the answers and
controls through the JSON API and keeps the live parts up to date. No build step, nothing from
another site."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from .api import in_thread, journal_of
from .auth import SECURITY_HEADERS, User
from .journal import Refused

HERE = Path(__file__).resolve().parent
#: statuses that need a person's eye first
NOT_OK = frozenset({"error", "timeout", "invalid_input", "invalid_output", "denied", "budget_exceeded",
                    "interrupted", "cancelled", "duplicate", "skipped"})
#: the most characters of one value the page shows (the API has the whole record)
SHOWN_CHARS = 4000
#: the most records of a run the page lists in its timeline, and among those needing attention
SHOWN_RECORDS = 500

_env = None


def env() -> Any:
    global _env
    if _env is None:
        import jinja2

        _env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True,
                                  undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        _env.filters["pretty"] = pretty
        _env.filters["text"] = text
        _env.filters["when"] = when
        _env.filters["tone"] = tone
        _env.filters["in_project"] = in_project
    return _env


def pretty(value: Any, limit: int | None = SHOWN_CHARS) -> str:
    """JSON for a person: indented, clipped, and still JSON that reads back the same value: every
    character that is not plain text (controls, DEL and C1, bidirectional marks, line separators,
    lone surrogates) written as a ``\\uXXXX`` escape."""
    from .._text import _UNSAFE

    try:
        out = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
    except (TypeError, ValueError):
        out = repr(value)
    out = _UNSAFE.sub(lambda m: m.group() if m.group() == "\n" else f"\\u{ord(m.group()):04x}", out)
    if limit is not None and len(out) > limit:
        return out[:limit] + f"\n… ({len(out) - limit} more characters; the API has the whole record)"
    return out


def text(value: Any) -> str:
    """Free text (a reason, a message, a key) with control characters shown escaped."""
    from .._text import escape

    return escape("" if value is None else str(value))


def when(stamp: Any) -> str:
    """``2026-01-02T03:04:05.123456Z`` as ``2026-01-02 03:04:05Z``."""
    if not isinstance(stamp, str) or "T" not in stamp:
        return "" if stamp is None else str(stamp)
    day, clock = stamp.split("T", 1)
    return f"{day} {clock.split('.', 1)[0].rstrip('Z')}Z"


def in_project(path: Any, project: str | None) -> str:
    """A plan's path relative to the project folder (the one holding the state folder) when it lies
    below it, as a person typed it there; escaped."""
    shown = "" if path is None else str(path)
    if project and shown.startswith(project.rstrip("/") + "/"):
        shown = shown[len(project.rstrip("/")) + 1:]
    return text(shown)


def tone(status: Any) -> str:
    """The colour family of a status, for its badge (the word is always shown too)."""
    if status in ("ok", "final", "approved", "continue"):
        return "good"
    if status in ("running",):
        return "busy"
    if status in ("stopped", "paused", "pending", "skipped", "cancelled", "duplicate", "steer", "mask"):
        return "wait"
    return "bad"


def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    state = request.scope.get("state", {})
    user: User | None = state.get("user")
    journal = request.app.state.journal if hasattr(request.app.state, "journal") else None
    project = str(journal.folder.parent) if journal is not None else None
    page = env().get_template(name).render(user=user.name if user else None, csrf=state.get("csrf", ""),
                                           path=request.url.path, project=project, **context)
    return HTMLResponse(page, status_code=status, headers={**SECURITY_HEADERS, "cache-control": "no-store"})


def refusal_page(status: int, why: str) -> str:
    from .auth import OPEN_WITH_TOKEN

    return env().get_template("refused.html").render(code=status, why=why, how=OPEN_WITH_TOKEN if status == 401
                                                     else "Reload the page and try again.", user=None, csrf="",
                                                     path="")


async def runs_page(request: Request) -> Response:
    journal = journal_of(request)

    def read() -> tuple[list[dict], int]:
        return journal.runs(), len(journal.approvals())

    runs, waiting = await in_thread(read)
    return render(request, "runs.html", runs=runs, waiting=waiting, title="Runs")


async def inbox_page(request: Request) -> Response:
    journal = journal_of(request)
    requests = await in_thread(journal.approvals)
    return render(request, "inbox.html", requests=requests, waiting=len(requests), title="Approvals")


async def run_page(request: Request) -> Response:
    journal = journal_of(request)

    def read() -> tuple:
        record, records, summary, live = journal.view(request.path_params["run_id"])
        no_resume = None if live else journal.resume_refusal(record["run_id"])
        return record, records, summary, live, journal.approvals(record["run_id"]), len(journal.approvals()), no_resume

    try:
        record, records, summary, live, pending, waiting, no_resume = await in_thread(read)
    except Refused as exc:
        return render(request, "refused.html", status=exc.status, code=exc.status, why=exc.message, how="See the list of runs.",
                      title="No such run")
    attention = [r for r in records if (r.get("type") == "receipt" and r.get("status") in NOT_OK)
                 or r.get("type") in ("supervisor", "guardrail") or (r.get("type") == "decision" and r.get("rejected"))]
    counts = {k: v for k, v in ((summary or {}).get("counts") or record["counts"]).items() if v}
    return render(request, "run.html", run=record, records=records[:SHOWN_RECORDS], summary=summary, live=live,
                  pending=pending, attention=attention[:SHOWN_RECORDS], counts=counts, waiting=waiting,
                  more=max(0, len(records) - SHOWN_RECORDS), more_attention=max(0, len(attention) - SHOWN_RECORDS),
                  no_resume=no_resume, title=f"Run {record['run_id']}")
