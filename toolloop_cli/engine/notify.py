"""Telling a person about a run (``notify``): a call starts waiting for them, the run pauses,
fails or finishes.

One ``Notifier`` per run, owned by its session (``session.py``), which a child run shares with
its parent. ``send`` queues an event for a delivery thread of its own (its own trio loop), so a
slow or broken receiver never holds the run's event loop back and an attempt is never cut short
by the run's end; after the summary, ``finish`` lets the thread send what is left (the run's
ending among it) for at most ``FINISH_WAIT_S``. Each event goes to a command (the event as one
JSON object on its standard input) or is POSTed to a URL, with a timeout of ``TIMEOUT_S`` and up
to ``ATTEMPTS`` tries (a command exiting non-zero, or an answer that is not 2xx, is tried again).
Each attempt is a ``notification`` record in the journal (kept outside the run's hash chain,
never printed with the run's records) and a failed one a warning too. Header values are secrets
of the run: scrubbed from every event, record and warning. Nothing here fails the run.
"""

from __future__ import annotations

import math
import os
import shlex
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qsl, urlsplit

import trio

from .._json import dumps
from .._secrets import credential_parts
from .._text import clip, escape, excerpt
from ..receipts import rfc3339
from .redact import RunSecrets

EVENTS = ("approval_request", "paused", "failed", "finished")
TIMEOUT_S = 10.0  # each attempt
ATTEMPTS = 3
RETRY_PAUSE_S = 1.0  # between two attempts of one event
FINISH_WAIT_S = 30.0  # what the process waits, after its summary, for the events still to send
_CUT = "cut"  # an attempt still going when the process stopped waiting
#: the variable that says where ``toolloop serve`` runs: events then link to the run's page
SERVE_URL_VAR = "TOOLLOOP_SERVE_URL"


@dataclass(frozen=True)
class NotifyTarget:
    """Where a run's events go (a ``notify`` block resolved): ``command`` with its relative paths
    made absolute, or ``url`` with the environment variables of its headers; ``on`` the events sent."""

    on: frozenset[str]
    command: tuple[str, ...] | None = None
    url: str | None = None
    headers_env: tuple[tuple[str, str], ...] = ()

    def headers(self, environ: Any) -> tuple[dict[str, str], list[str]]:
        """The headers to send, and the variables that are unset (their headers are left out)."""
        sent: dict[str, str] = {}
        unset: list[str] = []
        for name, var in self.headers_env:
            value = environ.get(var)
            if value:
                sent[name] = value
            else:
                unset.append(var)
        return sent, unset

    def secrets(self, environ: Any) -> list[str]:
        """The target's secrets: its header values, and the parts of its URL a warning never
        names (the password, the path and query, each query value: a webhook's token is often there)."""
        found = [part for _name, var in self.headers_env if environ.get(var) for part in credential_parts(environ[var])]
        if self.url:
            found.extend(url_secrets(self.url))
        return found

    def shown(self) -> str:
        """The target as a warning names it: never a header, a URL's path or its query (a
        webhook's path is often its secret)."""
        if self.command is not None:
            return f"command {excerpt(Path(self.command[0]).name)}"
        parts = urlsplit(self.url or "")
        try:
            port = parts.port
        except ValueError:  # a port out of range: the attempt says so, the name stays short
            port = None
        return f"{parts.scheme}://{escape(parts.hostname or '')}" + (f":{port}" if port else "")


def url_secrets(url: str) -> list[str]:
    """The parts of ``url`` that may carry a credential: its password, what follows its host
    (path and query, as written) and each query value."""
    parts = urlsplit(url)
    tail = url.split(parts.netloc, 1)[1] if parts.netloc else ""
    found = [parts.password or "", tail if tail.strip("/?#") else ""]
    found += [value for _key, value in parse_qsl(parts.query)]
    return [value for value in found if value]


def _absolute(arg: str, base: Path, first: bool) -> str:
    """A relative path in ``command`` is relative to the file that declares it: any argument that
    starts with ``./`` or ``../``, and a program named with a slash (``bin/notify``)."""
    if arg.startswith(("./", "../")) or (first and "/" in arg and not os.path.isabs(arg)):
        return os.path.normpath(base / arg)
    return arg


def notify_target(plan: Any) -> NotifyTarget | None:
    """The admitted plan's ``notify`` (the plan's own, else its subagent's ``runner_defaults``),
    resolved; None when neither says one."""
    decl = getattr(plan.decl, "notify", None) if plan.decl is not None else None
    if decl is not None:
        base = Path(os.path.abspath(plan.path)).parent
    else:
        # a contract compiled in process may carry no registry declaration: then nothing says notify
        subagents = getattr(getattr(plan.contract, "decl", None), "subagents", None)
        sub = subagents.get(plan.subagent.id) if isinstance(subagents, dict) else None
        decl = getattr(getattr(sub, "runner_defaults", None), "notify", None)
        base = Path(os.path.abspath(plan.contract.file)).parent
    if decl is None:
        return None
    command = tuple(_absolute(a, base, i == 0) for i, a in enumerate(decl.command)) if decl.command else None
    return NotifyTarget(on=frozenset(decl.on), command=command, url=decl.url,
                        headers_env=tuple(sorted(decl.headers_env.items())))


def approve_command(run_id: str, call_key: str | None, item_key: str | None, answer: str = "--approve",
                    state_dir: str | None = None) -> str:
    """The exact ``toolloop approve`` line that answers a call waiting for a person (``answer``:
    ``--approve``, ``--reject`` or both as ``--approve|--reject`` in a hint)."""
    words = ["toolloop", "approve", run_id, shlex.quote(call_key or "")]
    if item_key:
        words += ["--item", shlex.quote(item_key)]
    if state_dir:
        words += ["--state-dir", shlex.quote(state_dir)]
    return " ".join([*words, answer])


async def _kill(proc: trio.Process) -> None:
    """A command still running at its timeout is killed (it had its 10 s)."""
    proc.kill()


class Notifier:
    """One run's notifications (see the module's docstring). ``store`` keeps the records (from
    the delivery thread; the store is thread-safe); ``warn`` takes a line for a person;
    ``secrets`` are the run's, which the headers' values join; ``clock`` is the delivery
    thread's (trio's ``MockClock`` in tests), never the run's."""

    def __init__(self, target: NotifyTarget, *, store: Any, run_id: str, plan: str, secrets: RunSecrets,
                 warn: Callable[[str], None] | None = None, environ: Any = None, state_dir: str | None = None,
                 clock: Any = None):
        self.target = target
        self.store = store
        self.run_id = run_id
        self.plan = plan
        self.labels: dict[str, str] = {}
        self.secrets = secrets
        self.warn = warn
        self.environ = os.environ if environ is None else environ
        self.state_dir = state_dir
        self.clock = clock  # the delivery thread's clock (None: the real one)
        secrets.add(target.secrets(self.environ))
        # events as [event, attempts made]: taken before the delivery thread runs, then its own
        self._early: list[list[Any]] = []
        self._items: deque[list[Any]] = deque()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._more: trio.Event = trio.Event()
        self._cutoff: float | None = None  # when the process stops waiting (trio time), once the run ended
        self._trying: trio.CancelScope | None = None  # the attempt under way

    # --- events ------------------------------------------------------------------------------
    def send(self, event: str, run_id: str | None = None, **fields: Any) -> None:
        """Queue ``event`` when the target wants it (``fields`` as they apply; None ones left out)."""
        if event not in self.target.on:
            return
        rid = run_id or self.run_id
        body: dict[str, Any] = {"event": event, "run_id": rid, "plan": self.plan, "labels": dict(self.labels)}
        body.update({k: v for k, v in fields.items() if v is not None})
        base = self.environ.get(SERVE_URL_VAR)
        if base:
            body["url"] = f"{base.rstrip('/')}/runs/{rid}"
        self._queue([self.secrets.deep(body), 0])

    def approval_request(self, *, run_id: str, tool: str, call_key: str | None, item_key: str | None, args: Any,
                         reason: str | None = None, taint: Any = None) -> None:
        """A call starts waiting for a person; ``args`` already redacted."""
        self.send("approval_request", run_id=run_id, tool=tool, call_key=call_key, item_key=item_key, args=args,
                  reason=reason, taint=taint,
                  approve_command=approve_command(run_id, call_key, item_key, state_dir=self.state_dir))

    def ended(self, summary: dict[str, Any], paused: list[tuple[Any, ...]]) -> None:
        """The run's summary is out: ``paused`` (exit 4), ``failed`` (exit 1 or 130), and
        ``finished`` when it ended (a paused run has not). ``paused`` lists the calls that wait."""
        status = summary.get("status")
        error = summary.get("error")
        fields: dict[str, Any] = {"status": status, "outcome": summary.get("outcome"),
                                  "reason": error.get("message") if isinstance(error, dict) else None,
                                  "taint": summary.get("tainted_by")}
        if status == "stopped":
            waiting = [p for p in paused if p[2] is None]
            if len(waiting) == 1 and len(paused) == 1:
                item_key, call_key, _child = waiting[0]
                fields.update(call_key=call_key, item_key=item_key, approve_command=approve_command(
                    self.run_id, call_key, item_key, state_dir=self.state_dir))
            if fields["reason"] is None and paused:
                fields["reason"] = (f"{len(paused)} call{'s' if len(paused) != 1 else ''} wait"
                                    f"{'' if len(paused) != 1 else 's'} for a person")
            self.send("paused", **fields)
            return
        if status in ("failed", "interrupted"):
            self.send("failed", **fields)
        self.send("finished", **fields)

    # --- delivery ----------------------------------------------------------------------------
    def _queue(self, item: list[Any]) -> None:
        with self._lock:
            token = self._token
            if token is None:  # the delivery thread is not taking events yet
                self._early.append(item)
                if self._thread is None:
                    self._thread = threading.Thread(target=self._serve_thread, name="toolloop-notify", daemon=True)
                    self._thread.start()
                return
        try:
            token.run_sync_soon(self._push, item)
        except trio.RunFinishedError:  # the delivery thread has stopped: ``finish`` says it was never sent
            with self._lock:
                self._early.append(item)

    def _serve_thread(self) -> None:
        try:
            trio.run(self._serve, clock=self.clock)
        except BaseException as exc:  # noqa: BLE001 - a notification never fails the run
            self._warn(f"notifications of run {self.run_id} stopped: {excerpt(self.secrets.text(str(exc)))}")
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        """The delivery thread's loop: events in order, each with its tries, until the run has
        ended and ``finish`` says so; from then on for at most ``FINISH_WAIT_S``."""
        self._more = trio.Event()
        with self._lock:
            self._token = trio.lowlevel.current_trio_token()
            self._items.extend(self._early)
            self._early.clear()
        self._ready.set()
        while True:
            while self._items:
                if not await self._deliver(self._items[0]):
                    return  # the process waited for its notifications long enough
                self._items.popleft()
            if self._cutoff is not None:
                return
            self._more = trio.Event()
            await self._more.wait()

    def _push(self, item: list[Any]) -> None:  # on the delivery thread
        self._items.append(item)
        self._more.set()

    def _close(self) -> None:  # on the delivery thread
        self._cutoff = trio.current_time() + FINISH_WAIT_S
        if self._trying is not None:  # an attempt under way stops at the cutoff too
            self._trying.deadline = min(self._trying.deadline, self._cutoff)
        self._more.set()

    def _left(self) -> float:
        """Seconds left before the process stops waiting (no limit while the run goes)."""
        return math.inf if self._cutoff is None else self._cutoff - trio.current_time()

    def finish(self) -> None:
        """The run has ended (its ending queued): send what is still to send, for at most
        ``FINISH_WAIT_S``; an event not sent by then is recorded as such. Never raises."""
        with self._lock:
            thread = self._thread
        if thread is None:
            return
        self._ready.wait(FINISH_WAIT_S)
        token = self._token
        if token is not None:
            try:
                token.run_sync_soon(self._close)
            except trio.RunFinishedError:
                pass
        thread.join(FINISH_WAIT_S + 5)  # the delivery thread keeps the time itself; this is a safety net
        if thread.is_alive():
            return
        left = [*self._items, *self._early]
        self._items.clear()
        self._early.clear()
        why = f"not sent: the process waited {FINISH_WAIT_S:g} s for it after the run ended"
        for event, _tries in left:
            self._record(event, 0, why, warn=False)
        if left:  # one line, however many there were
            names = ", ".join(dict.fromkeys(event["event"] for event, _tries in left))
            self._warn(f"{len(left)} notification{'s' if len(left) != 1 else ''} of run {self.run_id} to"
                       f" {self.target.shown()} never sent ({names}): the process waited {FINISH_WAIT_S:g} s"
                       " for them after the run ended")

    async def _deliver(self, item: list[Any]) -> bool:
        """Send one event, trying again after a failure; False when the time the process waits
        after the run ran out first (the event is left to ``finish``)."""
        event = item[0]
        body = dumps(event)
        while item[1] < ATTEMPTS:
            if item[1]:
                await trio.sleep(max(0.0, min(RETRY_PAUSE_S, self._left())))
            # one deadline at a time: the attempt's, cut to the time left once the run has ended
            left = self._left()
            if left <= 0:
                return False
            error = await self._attempt(body, min(TIMEOUT_S, left))
            if error is _CUT:
                return False
            item[1] += 1
            self._record(event, item[1], error)
            if error is None:
                return True
        return True

    async def _attempt(self, body: bytes, timeout: float) -> str | None:
        """One try: None when it went through, else why not (never a header's value); ``_CUT``
        when it was still going when the time the process waits ran out."""
        with trio.move_on_after(timeout) as self._trying:
            try:
                if self.target.command is not None:
                    return await self._run_command(body)
                return await self._post(body)
            except (OSError, ValueError) as exc:
                return f"cannot start it: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}"
            finally:
                self._trying = None
        return _CUT if self._left() <= 0 else f"no answer within {TIMEOUT_S:g} s"

    async def _run_command(self, body: bytes) -> str | None:
        proc = await trio.run_process(list(self.target.command or ()), stdin=body, capture_stdout=True,
                                      capture_stderr=True, check=False, deliver_cancel=_kill)
        if proc.returncode == 0:
            return None
        said = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        # scrubbed before it is clipped: a secret cut in two at the clip would no longer be found
        return f"exit status {proc.returncode}" + (f": {clip(self.secrets.text(said[-1]))}" if said else "")

    async def _post(self, body: bytes) -> str | None:
        import httpx

        headers, unset = self.target.headers(self.environ)
        if unset:
            return f"header variable {unset[0]} is unset"
        try:
            async with httpx.AsyncClient(timeout=TIMEOUT_S, follow_redirects=False) as client:
                answer = await client.post(self.target.url or "", content=body,
                                           headers={"Content-Type": "application/json", **headers})
        except httpx.HTTPError as exc:
            return f"cannot reach {self.target.shown()}: {type(exc).__name__}"
        if 200 <= answer.status_code < 300:
            return None
        return f"HTTP {answer.status_code}"

    # --- records -----------------------------------------------------------------------------
    def _record(self, event: dict[str, Any], attempt: int, error: str | None, warn: bool = True) -> None:
        record = {"type": "notification", "run_id": event["run_id"], "event": event["event"], "attempt": attempt,
                  "ok": error is None, "error": None if error is None else self.secrets.text(error),
                  "at": rfc3339(time.time())}
        try:
            self.store.put_notification(record)
        except Exception as exc:  # noqa: BLE001 - a notification never fails the run
            self._warn(f"a notification record of run {self.run_id} could not be kept:"
                       f" {excerpt(self.secrets.text(str(exc)))}")
        if error is not None and warn:
            self._warn(f"notification {event['event']} of run {event['run_id']} to {self.target.shown()} failed"
                       f" (attempt {attempt} of {ATTEMPTS}): {record['error']}")

    def _warn(self, text: str) -> None:
        if self.warn is not None:
            try:
                self.warn(self.secrets.text(text))
            except Exception:  # noqa: BLE001 - a warning must never break the run
                pass
