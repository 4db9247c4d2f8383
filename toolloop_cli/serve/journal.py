"""What the API and the page read and change in the journal, through the same functions as the
command line: runs as ``runs list`` shows them, a run's records as ``runs show`` prints them,
pending requests as ``approvals list`` lists them, answers through the journal's
compare-and-set, steer and abort as control records, and ``toolloop resume`` started in the
background. Every method is synchronous (the app calls them in a worker thread) and raises
``Refused`` with an HTTP status for what it will not do.
"""

from __future__ import annotations

import subprocess
import sys
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
        self._resumes: dict[str, tuple[subprocess.Popen, float]] = {}  # run id: (process, started at)
        self._lock = threading.Lock()

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
        message = message or None
        edited = body.get("args")
        if edited is not None and decision == "reject":
            raise Refused(400, "args go with approve (a rejected call does not run)")
        run = self._run(run_id)
        rid = run["run_id"]
        where = f"call '{_clip(call_key)}'" + (f" in lane '{_clip(item_key)}'" if item_key else "")
        row = self.store.approval(rid, item_key, call_key)
        if row is None:
            raise Refused(404, f"no {where} waits for approval in run {rid}")
        if row["state"] != "pending":
            raise Refused(409, f"{where} of run {rid} was answered already; nothing changed")
        stored, typed = None, []
        if edited is not None:
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
        n = self.store.add_control(rid, kind, message or None)
        return {"run_id": rid, "kind": kind, "n": n}

    def resume_refusal(self, run_id: str) -> str | None:
        """Why resuming the run would run nothing (None when something is left to run): a run that
        finished ok, a routed run that ended with an outcome, a batch run whose calls have all
        run (the failed ones stay failed unless ``toolloop resume --retry-failed``)."""
        return self._nothing_left(self._run(run_id))

    def _nothing_left(self, run: dict) -> str | None:
        from ..engine.resume import resume_action
        from ..runview import shown_status

        rid, status = run["run_id"], shown_status(run)
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

    def start_resume(self, run_id: str) -> tuple[str, subprocess.Popen]:
        """Start ``toolloop resume RUN_ID`` in the background with this state folder; 409 when the
        run is running (or a resume this server started has not ended)."""
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
            since = time.time()
            # its messages go to a file (it outlives the server if need be), then to the server's log
            log_path = self.folder / "serve" / f"resume-{rid}.log"
            log_path.parent.mkdir(exist_ok=True)
            with open(log_path, "wb") as log_file:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "toolloop_cli", "resume", rid, "--state-dir", str(self.folder),
                     "--format", "jsonl"],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_file, start_new_session=True)
            self._resumes[rid] = (proc, since)
        threading.Thread(target=self._follow_resume, args=(rid, proc, log_path), daemon=True,
                         name=f"toolloop-serve-resume-{rid}").start()
        return rid, proc

    def resume_under_way(self, run_id: str, proc: subprocess.Popen) -> bool:
        """Whether the background resume has reopened the run, or has already ended."""
        if proc.poll() is not None:
            return True
        run = self.store.get_run(run_id)
        return run is not None and run["summary"] is None and holder_pid(run["lease_owner"]) == str(proc.pid)

    def _follow_resume(self, rid: str, proc: subprocess.Popen, log_path: Path) -> None:
        from .._text import escape

        code = proc.wait()
        try:
            lines = log_path.read_bytes().decode("utf-8", "replace").splitlines()
        except OSError:
            lines = []
        for line in lines[-20:]:
            self.log(f"resume {rid}: {escape(line.rstrip())}")
        self.log(f"resume {rid} ended with exit code {code}")
