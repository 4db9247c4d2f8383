"""What the API and the page read and change in the journal, through the same functions as the
command line: runs as ``runs list`` shows them, a run's records as ``runs show`` prints them,
pending requests as ``approvals list`` lists them, answers through the journal's
compare-and-set, steer and abort as control records, and a run resumed in the background (in
this process, through the engine's launch). Every method is synchronous (the app calls them in a
worker thread) and raises ``Refused`` with an HTTP status for what it will not do.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from .._canonical import sha256_of
from ..errors import UsageError
from ..store import Store, holder_alive, holder_pid


class Refused(Exception):
    """A request the journal will not serve: ``status`` is its HTTP status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _clip(value: Any) -> str:
    from .._text import excerpt

    return excerpt(value)


class Journal:
    """One state folder's journal, shared by every request of the server."""

    def __init__(self, folder: Path, log: Callable[[str], None] = lambda _line: None):
        self.folder = folder.resolve()
        self.store = Store(self.folder)
        self.log = log
        self._resumes: dict[str, tuple[Resuming, float]] = {}  # run id: (resume, started at)
        self._lock = threading.Lock()
        self._tokens: Any = None  # a Scrubber of the people's tokens (``hold_tokens``)

    def hold_tokens(self, tokens: list[str]) -> None:
        """The people's tokens are secrets: of every run this server resumes (a tool that echoes
        one), and of what a person types (a message keeps a marker in its place)."""
        from .._secrets import Scrubber, credential_parts, hold_credentials

        parts = [part for token in tokens for part in credential_parts(token)]
        hold_credentials(parts)
        self._tokens = Scrubber(parts)

    def _scrubbed(self, text: str | None) -> str | None:
        return self._tokens.text(text) if self._tokens and text else text

    def _no_token_in(self, edited: Any) -> None:
        if self._tokens and self._tokens.deep(edited) != edited:
            raise Refused(422, "the arguments hold a token of this server's users; a token is never stored or given"
                               " to a tool: take it out (the request stays pending)")

    def close(self) -> None:
        self.store.close()

    # --- reading ------------------------------------------------------------------------
    def _run(self, run_id: str) -> dict:
        from ..engine.resume import find_run

        try:
            return find_run(self.store, run_id)
        except UsageError as exc:
            raise Refused(400 if "ambiguous" in str(exc) else 404, str(exc)) from None

    def runs(self) -> list[dict]:
        """Every run's ``run`` record, newest first."""
        from ..runview import run_record

        return [run_record(self.store, run) for run in self.store.list_runs()]

    def run(self, run_id: str) -> dict:
        from ..runview import run_record

        return run_record(self.store, self._run(run_id))

    def view(self, run_id: str) -> tuple[dict, list[dict], dict | None, bool]:
        """``(run record, records in printed order, summary or None, still running)``."""
        from ..runview import printed_records, run_record

        run = self._run(run_id)
        record = run_record(self.store, run)
        summary = run["summary"] if run["status"] != "running" else None
        return record, printed_records(self.store, run), summary, record["status"] == "running"

    def records(self, run_id: str) -> list[dict]:
        """The run's records in printed order, the summary last (when it has one)."""
        _record, records, summary, _live = self.view(run_id)
        return records + ([summary] if summary else [])

    def approvals(self, run_id: str | None = None) -> list[dict]:
        """Pending approval requests (of one run, or of all) as ``approval_request`` records."""
        from ..pending import pending_records

        return pending_records(self.store, self._run(run_id)["run_id"] if run_id else None)

    def changes(self) -> int:
        """A number that changes whenever another process commits to the journal."""
        return self.store.data_version()

    # --- answering ------------------------------------------------------------------------
    def answer(self, run_id: str, item_key: str | None, call_key: str, body: Any, by: str) -> dict:
        """Approve (possibly with edited arguments) or reject a pending request, once."""
        if not isinstance(body, dict):
            raise Refused(400, 'send a JSON object: {"decision": "approve" | "reject", "args": {...}?, "message": "..."?}')
        unknown = sorted(set(body) - {"decision", "args", "message"})
        if unknown:
            raise Refused(400, f"unknown field {_clip(unknown[0])!s}; the fields are decision, args and message")
        decision = body.get("decision")
        if decision not in ("approve", "reject"):
            raise Refused(400, 'decision must be "approve" or "reject"')
        message = body.get("message")
        if message is not None and not isinstance(message, str):
            raise Refused(400, "message must be text")
        message = self._scrubbed(message or None)
        edited = body.get("args")
        if edited is not None and decision == "reject":
            raise Refused(400, "args go with approve (a rejected call does not run)")
        run = self._run(run_id)
        rid = run["run_id"]
        where = f"call '{_clip(call_key)}'" + (f" in lane '{_clip(item_key)}'" if item_key else "")
        row = self.store.approval(rid, item_key, call_key)
        if row is None:
            raise Refused(404, f"no {where} waits for approval in run {rid}")
        if row["state"] == "expired":
            raise Refused(410, f"{where} of run {rid} is gone: {row['message']}")
        if row["state"] != "pending":
            raise Refused(409, f"{where} of run {rid} was answered already; nothing changed")
        stored, typed = None, []
        if edited is not None:
            self._no_token_in(edited)
            edited, tool = self._checked_edit(run, item_key, call_key, edited)
            if edited is not None:
                from ..answers import stored_edit

                stored, typed = stored_edit(tool, edited)  # a redacted value never lands in the journal
        state = "approved" if decision == "approve" else "rejected"
        ok = self.store.answer_approval(rid, item_key, call_key, state,
                                        args_sha256=sha256_of(edited) if edited is not None else None, args=stored,
                                        message=message, approver=by)
        if not ok:
            raise Refused(409, f"{where} of run {rid} was answered meanwhile; nothing changed")
        out = {"run_id": rid, "item_key": item_key, "call_key": call_key, "state": state,
               "edited": edited is not None, "by": by}
        if typed:
            from ..answers import withheld_note

            out["note"] = withheld_note(typed, rid)
        return out

    def _checked_edit(self, run: dict, item_key: str | None, call_key: str, edited: Any) -> tuple[Any, Any]:
        """Edited arguments checked against the tool's input schema (422 when they fail; the
        request stays pending), or None when they are the arguments as shown; and the tool."""
        from ..answers import edit_problem, tool_for_call

        if not isinstance(edited, dict):
            raise Refused(422, "the arguments fail the tool's input schema: arguments must be a JSON object")
        shown = next((r for r in self.approvals(run["run_id"])
                      if r["call_key"] == call_key and (r["item_key"] or None) == (item_key or None)), None)
        shown_args = shown["args"] if shown is not None else None
        if shown_args is not None and edited == shown_args:
            return None, None  # nothing edited: the call's own arguments are approved
        tool = tool_for_call(self.store, run, item_key, call_key)
        if tool is None:
            raise Refused(422, "the arguments cannot be checked: the run's registry or call can no longer be read;"
                               " the request stays pending")
        problem = edit_problem(tool, edited, shown_args)
        if problem:
            raise Refused(422, f"the arguments fail the tool's input schema: {problem}")
        return edited, tool

    # --- operators ----------------------------------------------------------------------
    def control(self, run_id: str, kind: str, body: Any) -> dict:
        """Steer (routed runs) or abort: a control record the run reads before its next turn."""
        if body is None:
            body = {}
        if not isinstance(body, dict) or set(body) - {"message"}:
            raise Refused(400, 'send a JSON object: {"message": "..."}')
        message = body.get("message")
        if message is not None and not isinstance(message, str):
            raise Refused(400, "message must be text")
        run = self._run(run_id)
        rid = run["run_id"]
        if kind == "steer" and run["mode"] != "routed":
            raise Refused(400, f"run {rid} is a {run['mode']} run; steer is for routed runs (abort stops any run)")
        if kind == "steer" and not (message or "").strip():
            raise Refused(400, "steer needs a message: what the model is told at its next turn")
        if run["status"] not in ("running", "stopped"):
            raise Refused(409, f"run {rid} has ended ({run['status']}); there is nothing to {kind}")
        n = self.store.add_control(rid, kind, self._scrubbed(message or None))
        return {"run_id": rid, "kind": kind, "n": n}

    def resume_refusal(self, run_id: str) -> str | None:
        """Why resuming the run would run nothing (None when something is left to run): a run that
        finished ok, a routed run that ended with an outcome, a batch run whose calls have all
        run (the failed ones stay failed unless ``toolloop resume --retry-failed``)."""
        return self._nothing_left(self._run(run_id))

    def _nothing_left(self, run: dict) -> str | None:
        from ..engine.resume import MCP_RUN, resume_action
        from ..runview import shown_status

        rid, status = run["run_id"], shown_status(run)
        if run["mode"] == "mcp":
            return MCP_RUN.format(run_id=rid)
        if status == "ok":
            return f"run {rid} finished ok; there is nothing left to run"
        if status != "failed":
            return None  # paused, stopped, interrupted or running: there is
        if run["mode"] == "routed":
            outcome = (run["summary"] or {}).get("outcome")
            if outcome in (None, "paused"):
                return None
            return f"run {rid} ended with outcome {outcome}; resuming it would run nothing"
        receipts = {r["seq"]: r for r in self.store.receipts_of(rid)}
        lanes: dict[Any, list[int]] = {}
        for seq, lane, *_rest in self.store.calls_of(rid):
            lanes.setdefault(lane, []).append(seq)
        for seqs in lanes.values():
            for seq in seqs:
                rec = receipts.get(seq)
                if resume_action(rec["status"] if rec else None, in_flight_write=False, retry_failed=False,
                                 retry_interrupted=False) != "keep":
                    return None  # runs again (a write that was in flight is settled as interrupted)
                if rec["status"] != "ok" or (rec.get("envelope") or {}).get("decision") == "stop":
                    break  # the rest of the lane stays as it is
        return (f"run {rid} failed and every call left to run has run; the failed calls run again only with"
                f" toolloop resume {rid} --retry-failed")

    def start_resume(self, run_id: str, raises: dict | None = None, by: str | None = None) -> tuple[str, Resuming]:
        """Resume the run in this process, in a thread of its own, with this state folder and the
        run's own options, raising ``raises`` (``by`` a person) for a run a budget paused; 409 when
        the run is running (or a resume this server started has not ended), 422 where ``toolloop
        resume`` would exit 2 (a budget that paused it not raised, a raise refused)."""
        from ..store import lease_token

        run = self._run(run_id)
        rid = run["run_id"]
        with self._lock:
            mine, since = self._resumes.get(rid, (None, 0.0))
            if mine is not None and mine.poll() is None and not (run["finished_at"] or 0) > since:
                raise Refused(409, f"run {rid} is being resumed already (process {mine.pid})")
            holder = run["lease_owner"]
            if holder is not None:
                alive = holder_alive(holder)
                if alive or (alive is None and (run["lease_until"] or 0) >= time.time()):
                    raise Refused(409, f"run {rid} is running (process {holder_pid(holder)}); wait for it to finish")
            why = self._nothing_left(run)
            if why is not None:
                raise Refused(409, why)
            refused = self._raise_refusal(rid, raises or {})
            if refused is not None:
                raise Refused(422, refused)
            resuming = Resuming(lease_token())
            self._resumes[rid] = (resuming, time.time())
        threading.Thread(target=self._resume, args=(rid, resuming, raises or {}, by), daemon=True,
                         name=f"toolloop-serve-resume-{rid}").start()
        return rid, resuming

    def resume_under_way(self, run_id: str, resuming: Resuming) -> bool:
        """Whether the resume has reopened the run, or has already ended."""
        if resuming.poll() is not None:
            return True
        run = self.store.get_run(run_id)
        return run is not None and run["summary"] is None and run["lease_owner"] == resuming.owner

    def _raise_refusal(self, rid: str, raises: dict) -> str | None:
        from ..engine.launch import Launch

        launch = Launch(self.folder)
        try:
            return launch.raise_refusal(rid, raises)
        finally:
            launch.close()

    def _resume(self, rid: str, resuming: Resuming, raises: dict | None = None, by: str | None = None) -> None:
        """The run resumed through the engine's launch; its records go to the journal only, what it
        has to say to the server's log."""
        from .._text import escape
        from ..engine.launch import Launch
        from ..errors import ConfigError, RunError, StateError

        def say(line: str) -> None:
            self.log(f"resume {rid}: {escape(line)}")

        launch = Launch(self.folder)
        code = 70
        try:
            prepared = launch.resume(rid, owner=resuming.owner, raises=raises, by=by if raises else None)
            result = launch.start(prepared, _Discarded(), handle_signals=False,
                                  on_warning=lambda text: say(f"warning: {text}"))
            code = result.exit_code
            say(f"the run ended {result.summary['status']}")
        except ConfigError as exc:
            from ..render.lint import format_text

            for line in format_text(exc.problems).splitlines()[-20:]:
                say(line)
            code = 3
        except (UsageError, RunError, StateError) as exc:
            say(f"error: {exc}")
            code = 1 if isinstance(exc, RunError) else 2
        except Exception as exc:  # noqa: BLE001 - the boundary of a resume the server runs: it is logged
            say(f"internal error: {type(exc).__name__} (a bug in toolloop; please report it)")
        finally:
            launch.close()
            self.log(f"resume {rid} ended with exit code {code}")
            resuming.end(code)


class Resuming:
    """A resume this server runs: ``pid`` (this process's), the lease ``owner`` it runs under, and
    ``poll()``, its exit code once it has ended (None until then)."""

    def __init__(self, owner: str):
        self.pid = os.getpid()
        self.owner = owner
        self.exit_code: int | None = None
        self._ended = threading.Event()

    def poll(self) -> int | None:
        return self.exit_code

    def end(self, code: int) -> None:
        self.exit_code = code
        self._ended.set()

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code once the resume has ended (None if ``timeout`` passes first)."""
        self._ended.wait(timeout)
        return self.exit_code


class _Discarded:
    """The records of a resume the server runs: in the journal already, printed nowhere."""

    def write(self, record: dict, line: bytes | None = None) -> None:
        return None

    def flush(self) -> None:
        return None
