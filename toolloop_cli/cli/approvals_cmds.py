"""approve and approvals list: answering calls that wait for a person.

``approve`` is the command people run over and over while a batch waits, so it starts fast: it
reads and writes the journal only, and loads the registry (importing the App) only when
``--args`` must be checked against the tool's input schema.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from .common import DataFormat, fail, record_writer, resolve_format

approvals_app = typer.Typer(help="Calls that wait for a person's approval.", no_args_is_help=True)

STATE_DIR_HELP = "Folder of state.db (default .toolloop, or TOOLLOOP_STATE_DIR)."


def _open_store(state_dir: Optional[Path]):  # noqa: ANN202 - Store, imported lazily
    from ..store import Store, state_dir as pick

    return Store(pick(str(state_dir) if state_dir else None), create=False)


def _key(item: Optional[str], call_key: str) -> str:
    return call_key + (f" --item {item}" if item else "")


def approve(
    run_id: str = typer.Argument(..., metavar="RUN_ID", help="Run id (a unique prefix is enough)."),
    call_key: Optional[str] = typer.Argument(None, metavar="CALL_KEY", help="The call_key of the call waiting for approval."),
    item: Optional[str] = typer.Option(None, "--item", metavar="ITEM_KEY", help="The lane's item_key (parallel plans)."),
    all_pending: bool = typer.Option(False, "--all-pending", help="Answer every call of the run that waits now."),
    yes: bool = typer.Option(False, "--approve", help="Approve the call."),
    no: bool = typer.Option(False, "--reject", help="Reject the call: it gets a denied receipt."),
    args: Optional[str] = typer.Option(None, "--args", metavar="JSON", help="Approve these arguments instead (a JSON object; checked against the tool's input schema)."),
    message: Optional[str] = typer.Option(None, "--message", metavar="TEXT", help="Why; a rejection's message goes into the denied receipt."),
    approver: Optional[str] = typer.Option(None, "--approver", metavar="NAME", help="Who answers, recorded with the answer (default: the login name)."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help=STATE_DIR_HELP),
) -> None:
    """Answer a call that waits for approval (or all of a run's), once; then run 'toolloop resume RUN_ID'."""
    _check_answer_flags(call_key, item, all_pending, yes, no, args)
    from .._login import login_name

    who = approver if approver is not None else login_name()
    state = "approved" if yes else "rejected"
    store = _open_store(state_dir)
    try:
        rid = store.resolve_run_id(run_id)
        if all_pending:
            return _answer_all(store, rid, state, message, who)
        assert call_key is not None
        item = _waiting(store, rid, item, call_key)
        ok, typed = _answer_one(store, rid, item, call_key, state, args, message, who)
        then = _continue_with(store, rid)
    finally:
        store.close()
    if not ok:
        fail("the request was answered meanwhile; nothing changed", 1)
    if typed:
        from ..answers import withheld_note

        sys.stderr.write(f"toolloop: note: {withheld_note(typed, rid)}\n")
    from .._text import escape

    where = f" in lane {escape(item)}" if item else ""
    sys.stderr.write(f"{state} {escape(call_key)}{where}; {then}\n")


def _check_answer_flags(call_key: Optional[str], item: Optional[str], all_pending: bool, yes: bool, no: bool,
                        args: Optional[str]) -> None:
    if yes == no:
        fail("give exactly one of --approve or --reject", 2)
    if all_pending and (call_key is not None or item is not None or args is not None):
        fail("--all-pending answers every waiting call of the run: give no CALL_KEY, --item or --args with it", 2)
    if not all_pending and call_key is None:
        fail("name the call (CALL_KEY, with --item in a parallel run), or give --all-pending", 2,
             "see the calls waiting with: toolloop approvals list RUN_ID")
    if args is not None and no:
        fail("--args goes with --approve", 2)


def _answer_all(store, rid: str, state: str, message: Optional[str], who: str) -> None:  # noqa: ANN001
    """``--all-pending``: every call of the run that waits now, answered the same way."""
    answered = store.answer_all_pending(rid, state, message=message, approver=who)
    if not answered:
        fail(f"no call waits for approval in run {rid}", 1)
    shown = ", ".join(_key(i, c) for i, c in answered[:5]) + (f" and {len(answered) - 5} more"
                                                               if len(answered) > 5 else "")
    sys.stderr.write(f"{state} {len(answered)} call{'s' if len(answered) != 1 else ''} ({shown});"
                     f" {_continue_with(store, rid)}\n")


def _waiting(store, rid: str, item: Optional[str], call_key: str) -> Optional[str]:  # noqa: ANN001
    """The lane of the named call that waits (found when ``--item`` is left out and it waits in
    one lane only); exit 1 naming the calls that do wait when it does not."""
    pending = store.approval(rid, item, call_key)
    if pending is not None and pending["state"] == "expired":  # its MCP server stopped before an answer
        fail(f"the request of call '{call_key}' in run {rid} is gone: {pending['message']}", 1)
    named = pending
    if item is None and (pending is None or pending["state"] != "pending"):
        item = _only_lane(store, rid, call_key)  # in a parallel run, the one lane where it waits
        pending = store.approval(rid, item, call_key) if item is not None else None
    _refuse_answered(store, rid, item, call_key, pending or named)
    if pending is None or pending["state"] != "pending":
        waiting = ", ".join(_key(p["item_key"], p["call_key"]) for p in store.pending_approvals(rid)) or "none"
        fail(f"no call '{call_key}'{f' in lane {item!r}' if item else ''} waits for approval in run {rid}",
             1, f"calls waiting: {waiting}")
    return item


def _refuse_answered(store, rid: str, item: Optional[str], call_key: str,  # noqa: ANN001
                     row: Optional[dict]) -> None:
    """Exit 1 for a call answered already, saying by whom and whether the run has read the answer
    (then what comes next), rather than only that no call waits."""
    if row is None or row["state"] not in ("approved", "rejected", "used"):
        return
    by = f" by {row['approver']}" if row.get("approver") else ""
    done = ("answered" + by + ", and the answer was used" if row["state"] == "used"
            else row["state"] + by + "; the run has not read the answer yet")
    where = f" in lane {item!r}" if item else ""
    fail(f"call '{call_key}'{where} of run {rid} was already {done}; nothing changed",
         1, None if row["state"] == "used" else _continue_with(store, rid))


def _answer_one(store, rid: str, item: Optional[str], call_key: str, state: str, args: Optional[str],  # noqa: ANN001
                message: Optional[str], who: str) -> tuple[bool, list]:
    """The answer written through the journal's compare-and-set (False: answered meanwhile), and
    the edited fields whose redacted values were withheld from the journal."""
    edited, stored, typed = None, None, []
    if args is not None:
        from ..answers import stored_edit

        edited, tool = _checked_args(store, rid, item, call_key, args)
        stored, typed = stored_edit(tool, edited)  # a redacted value never lands in the journal
    from .._canonical import sha256_of

    ok = store.answer_approval(rid, item, call_key, state,
                               args_sha256=sha256_of(edited) if edited is not None else None, args=stored,
                               message=message, approver=who)
    return ok, typed


def _continue_with(store, run_id: str) -> str:  # noqa: ANN001
    """The resume that goes on: the run's own, or for a child run its top run's, which resumes the
    child first (resuming the child alone would leave its parent waiting)."""
    from ..lineage import continue_with

    return continue_with(store, store.get_run(run_id) or {"run_id": run_id})


def _only_lane(store, run_id: str, call_key: str) -> Optional[str]:  # noqa: ANN001
    """The lane where a call named without ``--item`` waits, when it waits in exactly one; when it
    waits in several, a usage error (exit 2) naming them and how to pick."""
    lanes = [p["item_key"] for p in store.pending_approvals(run_id) if p["call_key"] == call_key and p["item_key"]]
    if len(lanes) <= 1:
        return lanes[0] if lanes else None
    from .._text import listing, quoted

    import shlex

    fail(f"call {quoted(call_key)} waits in {len(lanes)} lanes of run {run_id}: {listing(lanes, 5)}", 2,
         f"pick one with --item ITEM_KEY (e.g. toolloop approve {run_id} {shlex.quote(call_key)} --item"
         f" {shlex.quote(lanes[0])} --approve), or answer every waiting call of the run with --all-pending")


def _checked_args(store, run_id: str, item: Optional[str], call_key: str, text: str) -> tuple:  # noqa: ANN001
    """``--args`` parsed and checked against the tool's input schema (the only case that loads
    the registry), with the tool; exit 1 and the request stays pending when they do not fit."""
    from .._json import JSONDecodeError, loads

    try:
        edited = loads(text)  # integers of any size stay exact
    except JSONDecodeError as exc:
        fail(f"--args is not JSON: {exc}", 1, "pass a JSON object")
    if not isinstance(edited, dict):
        fail("--args fail the tool's input schema: arguments must be a JSON object", 1, "the request stays pending")
    from ..answers import tool_for_call
    from ..engine.gates import input_problem

    tool = tool_for_call(store, store.get_run(run_id), item, call_key)
    if tool is None:
        fail("--args cannot be checked: the run's registry or call can no longer be read", 1,
             "the request stays pending")
    # (resume checks approved arguments again before the call runs, whatever the tool's schema source)
    problem = input_problem(tool, edited)
    if problem:
        fail(f"--args fail the tool's input schema: {problem}", 1, "the request stays pending")
    return edited, tool


@approvals_app.command("list")
def list_approvals(
    run_id: Optional[str] = typer.Argument(None, metavar="RUN_ID", help="Only this run's requests (a unique prefix is enough)."),
    format: DataFormat = typer.Option(DataFormat.auto, "--format", "-f", metavar="auto|table|jsonl|json", help="auto, table, jsonl or json."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help=STATE_DIR_HELP),
) -> None:
    """Calls waiting for approval: run, keys, tool, effect and exact (redacted) arguments."""
    from ..pending import pending_records

    store = _open_store(state_dir)
    try:
        rid = store.resolve_run_id(run_id) if run_id is not None else None
        requests = pending_records(store, rid)
    finally:
        store.close()
    fmt = resolve_format(format, sys.stdout)
    writer = record_writer(fmt, sys.stdout.buffer)
    try:
        for rec in requests:
            writer.write(rec)
        writer.close()
        if fmt == "table" and not requests:  # an empty table would say nothing at all
            from .common import notice

            notice("no call waits for approval" + (f" in run {rid}" if rid else ""))
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        raise typer.Exit(141)
