"""What a run journals as it goes: receipts, its other output records (decisions, supervisor and
guardrail records), the model answers of a routed run, the answers and receipts a resumed
routed run went past (moved apart, never deleted: ``move_went_past``), and the hash chain over
all of them.

Each record commits in one transaction with its link in its run's hash chain (``chain.py`` says
how links are computed and checked). Approval requests and answers and operator controls are
links of the same chain (``link`` and ``linked_text``, used by ``approvals.py`` and
``controls.py``).
"""

from __future__ import annotations

import sqlite3
from hashlib import sha256
from typing import Any

from .. import _json
from .._request_delta import rebuilt
from ..chain import EMPTY_SHA256, RESET, WENT_PAST, Link, describe, link_sha256, record_sha256
from ..errors import StateError
from ..receipts import rfc3339
from .db import MODEL_ANSWER, RECEIPT, Connection, Database, dumps, naming_the_run, parse_object

#: The keys every reader of a journaled record relies on, by the kind of record
_RECORD_KEYS: dict[str, dict[str, Any]] = {
    "receipt": RECEIPT,
    "record": {"type": str},
    "model_answer": MODEL_ANSWER,
    # a call's start marker with no receipt, set aside as went past (``move_went_past``)
    "start": {"type": str, "run_id": str, "seq": int, "started_at": str},
}


def _record(kind: str, ref: int, text: str) -> dict:
    """A journaled record read back: a JSON object with the keys its readers rely on, of the type
    its table holds (a decision in the receipts' table would be shown as what it is not)."""
    what = describe(kind, ref)
    rec = parse_object(text, what, _RECORD_KEYS[kind])
    shown = rec["type"]
    wrong = shown in ("receipt", "model_answer", "summary") if kind == "record" else shown != kind
    if wrong:
        raise StateError(f"{what} is a '{shown[:40]}' record")
    return rec


def _linked_row(cur: Any, row: tuple) -> str:
    """An approval request or control as its link hashes it: the row's columns but its keys'
    numbers, NULL ones left out (so a column added later does not change older rows' text), as
    canonical JSON."""
    return _json.dumps({d[0]: v for d, v in zip(cur.description, row)
                        if d[0] not in ("run_id", "n", "linked") and v is not None}, canonical=True).decode()


def link(db: Connection, entries: list[tuple[str, str, int, str | None]]) -> None:
    """Append ``(run_id, kind, ref, stored text)`` to their runs' hash chains, in order
    (inside the transaction that stores the records)."""
    _link(db, [(run_id, kind, ref, EMPTY_SHA256 if text is None else record_sha256(text))
               for run_id, kind, ref, text in entries])


def _link(db: Connection, entries: list[tuple[str, str, int, str]],
          known: dict[str, tuple[int, str]] | None = None) -> dict[str, tuple[int, str]]:
    """``link`` of ``(run_id, kind, ref, record digest)``: the digests already taken, of the very
    bytes each record is stored as (a receipt's JSON is hashed as it is written, not encoded
    again from the text). Returns each run's new head, ``(n, link)``.

    ``known``: the heads this store last committed, taken without reading them back when the links
    are of one run. Another writer (an operator's control or approval, in another process) may
    have linked since: its link then holds the number the first new one takes, the chain's key
    refuses that one (nothing was inserted), and the head is read again."""
    one_run = known is not None and len({e[0] for e in entries}) == 1
    rows, heads = _chained(db, entries, known if one_run else None)
    if not rows:
        return heads
    try:
        db.executemany(_INSERT_LINK, rows)
    except sqlite3.IntegrityError:
        if not one_run or entries[0][0] not in known:  # type: ignore[operator]
            raise
        rows, heads = _chained(db, entries, None)
        db.executemany(_INSERT_LINK, rows)
    return heads


_INSERT_LINK = "INSERT INTO chain (run_id, n, kind, ref, record_sha256, link_sha256) VALUES (?,?,?,?,?,?)"


def _chained(db: Connection, entries: list[tuple[str, str, int, str]],
             known: dict[str, tuple[int, str]] | None) -> tuple[list[tuple], dict[str, tuple[int, str]]]:
    """The chain's rows for ``entries``, each run's from its head (``known``, or read)."""
    heads: dict[str, tuple[int, str]] = {}
    rows = []
    for run_id, kind, ref, digest in entries:
        head = heads.get(run_id)
        if head is None and known is not None:
            head = known.get(run_id)
        if head is None:
            row = db.execute("SELECT n, link_sha256 FROM chain WHERE run_id=? ORDER BY n DESC LIMIT 1",
                             (run_id,)).fetchone()
            head = (row[0], row[1]) if row is not None else (-1, "")
        linked = link_sha256(head[1], kind, ref, digest)
        head = heads[run_id] = (head[0] + 1, linked)
        rows.append((run_id, head[0], kind, ref, digest, linked))
    return rows, heads


def linked_text(db: Connection, kind: str, run_id: str, ref: int) -> str | None:
    """The text an approval request or a control is linked as, or None when there is no such
    row (or, for a control, it was journaled before controls were links)."""
    sql = ("SELECT * FROM approvals WHERE run_id=? AND n=?" if kind == "approval"
           else "SELECT * FROM controls WHERE run_id=? AND n=? AND linked IS NOT NULL")
    cur = db.execute(sql, (run_id, ref))
    row = cur.fetchone()
    return None if row is None else _linked_row(cur, row)


def _went_past_calls(db: Connection, run_id: str, from_seq: int) -> list[int]:
    """The seqs of the routed loop's receipts from ``from_seq`` on (those with no parent) and of
    every receipt dispatched under one of them."""
    rows = db.execute("SELECT seq, json_extract(record, '$.receipt_id'), json_extract(record, '$.parent_receipt_id')"
                      " FROM receipts WHERE run_id=?", (run_id,)).fetchall()
    gone = {rid: seq for seq, rid, parent in rows if parent is None and seq >= from_seq}
    grew = True
    while grew:
        grew = False
        for seq, rid, parent in rows:
            if parent is not None and parent in gone and rid not in gone:
                gone[rid] = seq
                grew = True
    return sorted(gone.values())


def _moves(moved: list[dict]) -> list[list[dict]]:
    """The model answers of went-past rows, by the move that set them aside: one move's rows share
    its time, and its answers' numbers go up."""
    out: list[list[dict]] = []
    for m in moved:
        if m["kind"] != "model_answer":
            continue
        last = out[-1][-1] if out else None
        if last is None or m["at"] != last["at"] or m["ref"] <= last["ref"]:
            out.append([])
        out[-1].append(m)
    return out


def _rebuild_moves(moved: list[dict], own: list[dict]) -> None:
    """Give each went-past answer its request whole (in place). A delta names an earlier answer
    of the run as it was when the delta was journaled, which a later move may have set aside in
    turn: so a move's answers are rebuilt on the run's answers of that time, which for each
    number is the copy set aside by the first later move that took that number, or else the
    run's own answer now (``own``, rebuilt). Moves are taken last first, each one's rebuilt
    answers then standing for their numbers for the moves before it."""
    current = {a["n"]: a for a in own}
    for move in reversed(_moves(moved)):
        first = move[0]["ref"]
        base = [current[n] for n in sorted(current) if n < first]
        for m, rec in zip(move, rebuilt([*base, *(m["record"] for m in move)])[len(base):]):
            m["record"] = rec
            current[m["ref"]] = rec


@naming_the_run
class Records(Database):
    """Receipts, other output records, model answers and the hash chain."""

    #: run -> the number its next other output record takes, as this store last committed it: a
    #: running run's records are written by its journal thread alone, so each transaction need not
    #: read it back (``clear_records`` forgets it)
    _next_record_n: dict[str, int] | None = None
    #: run -> its hash chain's head ``(n, link)`` as this store last committed it (``_link``)
    _chain_heads: dict[str, tuple[int, str]] | None = None

    def put_receipts(self, records: list[dict]) -> list[bytes]:
        """Commit receipt records (one transaction); a later record for the same call replaces
        the earlier one (resume settles a cancelled write as interrupted, or re-runs a call).
        Returns each one's JSON as stored (``put_records``)."""
        return self.put_records(records)

    def put_records(self, receipts: list[dict], others: list[tuple[dict, int]] = (),  # type: ignore[assignment]
                    answers: list[dict] = ()) -> list[bytes]:  # type: ignore[assignment]
        """Commit receipts, other output records and model answers in one transaction, each with
        its link in its run's hash chain (model answers first, then receipts, then the others, in
        the order given). ``others`` are ``(record, receipts_before)``: the record and how many
        receipts were printed before it; ``answers`` are ``model_answer`` records.

        Returns the receipts' JSON bytes as stored, in their order (``_json.dumps``, the compact
        form a JSON Lines writer prints): the journal hands them on with the records."""
        # each record's JSON is built once: its text is stored, its bytes hashed for its link and
        # returned for the output
        rows, receipt_links, raws = [], [], []
        for r in receipts:
            raw = _json.dumps(r)
            raws.append(raw)
            run_id, seq = r["run_id"], r["seq"]
            rows.append((run_id, seq, r["status"], raw.decode()))
            receipt_links.append((run_id, "receipt", seq, sha256(raw).hexdigest()))
        answer_rows = [(a["run_id"], a["n"], a["role"], a["request_sha256"], a.get("text") or "", dumps(a))
                       for a in answers]
        known = self._next_record_n
        if known is None:
            known = self._next_record_n = {}
            self._chain_heads = {}
        next_n: dict[str, int] = {}
        heads: dict[str, tuple[int, str]] = {}

        def work() -> None:
            links: list[tuple[str, str, int, str]] = []
            if answer_rows:
                self.db.executemany(
                    "INSERT OR REPLACE INTO model_answers (run_id, n, role, request_sha256, answer, record)"
                    " VALUES (?,?,?,?,?,?)", answer_rows)
                links += [(run_id, "model_answer", n, record_sha256(text))
                          for run_id, n, _r, _s, _a, text in answer_rows]
            if rows:
                self.db.executemany(
                    "INSERT OR REPLACE INTO receipts (run_id, seq, status, record) VALUES (?,?,?,?)", rows)
                links += receipt_links
            next_n.clear()
            heads.clear()
            for rec, before in others:
                run_id, text = rec["run_id"], dumps(rec)
                n = next_n.get(run_id)
                kept = n is None and run_id in known
                if kept:
                    n = known[run_id]
                try:
                    n = self._put_record(run_id, n, rec["type"], before, text)
                except sqlite3.IntegrityError:  # another store wrote the run's records since: read again
                    if not kept:
                        raise
                    n = self._put_record(run_id, None, rec["type"], before, text)
                next_n[run_id] = n + 1
                links.append((run_id, "record", n, record_sha256(text)))
            heads.update(_link(self.db, links, self._chain_heads))

        with self._lock:  # committed: the numbers the next transaction continues from
            self._transaction(work)
            known.update(next_n)
            self._chain_heads.update(heads)  # type: ignore[union-attr]
        return raws

    def _put_record(self, run_id: str, n: int | None, kind: str, before: int, text: str) -> int:
        """Insert another output record as number ``n`` (None: the run's next, read); returns it."""
        if n is None:
            n = self.db.execute("SELECT COALESCE(MAX(n), -1) + 1 FROM records WHERE run_id=?",
                                (run_id,)).fetchone()[0]
        self.db.execute("INSERT INTO records (run_id, n, type, receipts_before, record) VALUES (?,?,?,?,?)",
                        (run_id, n, kind, before, text))
        return n  # type: ignore[return-value]

    def clear_records(self, run_id: str) -> None:
        """Forget a run's other output records (a resumed routed run records them again as it
        replays); the hash chain says so with a reset link."""
        def work() -> None:
            self.db.execute("DELETE FROM records WHERE run_id=?", (run_id,))
            link(self.db, [(run_id, RESET, -1, None)])

        with self._lock:
            self._transaction(work)
            if self._next_record_n is not None:
                self._next_record_n.pop(run_id, None)

    def records_of(self, run_id: str) -> list[tuple[int, dict]]:
        """The run's other output records in commit order: ``(receipts_before, record)``."""
        with self._lock:
            rows = self.db.execute("SELECT n, receipts_before, record FROM records WHERE run_id=? ORDER BY n",
                                   (run_id,)).fetchall()
        return [(before, _record("record", n, rec)) for n, before, rec in rows]

    def receipts_of(self, run_id: str) -> list[dict]:
        with self._lock:
            rows = self.db.execute("SELECT seq, record FROM receipts WHERE run_id=? ORDER BY seq", (run_id,)).fetchall()
        return [_record("receipt", seq, text) for seq, text in rows]

    def counts_of(self, run_id: str) -> dict[str, int]:
        """Receipts per status so far (for a run that has no summary yet)."""
        with self._lock:
            return dict(self.db.execute(
                "SELECT status, COUNT(*) FROM receipts WHERE run_id=? GROUP BY status ORDER BY status", (run_id,)))

    # --- model answers (routed runs: replay and resume reuse them) ---------------------
    def put_model_answer(self, answer: dict) -> None:
        """Commit one model answer (a ``model_answer`` record: run_id, n, role, request_sha256, ...)
        with its link in the run's hash chain."""
        self.put_records([], (), [answer])

    def move_went_past(self, run_id: str, from_n: int, from_seq: int, at: float) -> None:
        """Set aside what an earlier attempt of a routed run journaled past the point where a
        resumed run went another way: its answers numbered ``from_n`` and after, and the calls
        those answers led to (the loop's receipts from ``from_seq`` on, the calls they
        dispatched; their start markers go, the receipt says when the call started). They are not
        the run's, so they leave its tables and no later resume, replay, fork or ``runs show``
        takes one of them as its own; but a receipt records an effect that happened, so each is
        moved, as stored, to the ``went_past`` table (``runs export`` gives them under the
        manifest's ``went_past``), with a link of its own carrying the record's digest, which
        ``runs verify`` checks against the moved copy. A call from ``from_seq`` on that started
        and never got a receipt (the process died in it) is moved as its start marker (kind
        ``start``): it may have had an effect, and left in place it would be taken for a call of
        the resumed run in flight at that seq. One transaction."""
        def work() -> None:
            answers = self.db.execute("SELECT n, record FROM model_answers WHERE run_id=? AND n>=?"
                                      " AND record IS NOT NULL ORDER BY n", (run_id, from_n)).fetchall()
            self.db.execute("DELETE FROM model_answers WHERE run_id=? AND n>=?", (run_id, from_n))
            starts = self.db.execute(
                "SELECT seq, started_at FROM starts WHERE run_id=? AND seq>=? AND seq NOT IN"
                " (SELECT seq FROM receipts WHERE run_id=?) ORDER BY seq", (run_id, from_seq, run_id)).fetchall()
            self.db.executemany("DELETE FROM starts WHERE run_id=? AND seq=?", [(run_id, s) for s, _at in starts])
            calls = _went_past_calls(self.db, run_id, from_seq)
            receipts = [(s, self.db.execute("SELECT record FROM receipts WHERE run_id=? AND seq=?",
                                            (run_id, s)).fetchone()[0]) for s in calls]
            self.db.executemany("DELETE FROM receipts WHERE run_id=? AND seq=?", [(run_id, s) for s in calls])
            self.db.executemany("DELETE FROM starts WHERE run_id=? AND seq=?", [(run_id, s) for s in calls])
            moved = ([("model_answer", n, text) for n, text in answers] + [("receipt", s, text) for s, text in receipts]
                     + [("start", s, dumps({"type": "start", "run_id": run_id, "seq": s, "started_at": rfc3339(at)}))
                        for s, at in starts])
            first = self.db.execute("SELECT COALESCE(MAX(n), -1) + 1 FROM went_past WHERE run_id=?",
                                    (run_id,)).fetchone()[0]
            self.db.executemany("INSERT INTO went_past (run_id, n, kind, ref, record, at) VALUES (?,?,?,?,?,?)",
                                [(run_id, first + i, kind, ref, text, at) for i, (kind, ref, text) in enumerate(moved)])
            link(self.db, [(run_id, WENT_PAST, first + i, text) for i, (_kind, _ref, text) in enumerate(moved)])

        self._transaction(work)

    def went_past_of(self, run_id: str) -> list[dict]:
        """The records set aside by ``move_went_past``, in the order they were moved: ``kind``,
        ``ref`` (the answer's ``n``, or the ``seq`` of the receipt or of the start marker of a call that
        never got one), ``at`` (when) and ``record``. A model answer's request journaled as a delta
        is given back whole where its base is known: each move's answers are rebuilt on the
        answers that were the run's when that move was made (``_rebuild_moves``)."""
        with self._lock:
            rows = self.db.execute("SELECT kind, ref, record, at FROM went_past WHERE run_id=? ORDER BY n",
                                   (run_id,)).fetchall()
            own = self.db.execute("SELECT n, record FROM model_answers WHERE run_id=? AND record IS NOT NULL ORDER BY n",
                                  (run_id,)).fetchall()
        out = [{"kind": kind, "ref": ref, "at": at, "record": _record(kind, ref, text)} for kind, ref, text, at in rows]
        _rebuild_moves(out, rebuilt(_record("model_answer", n, text) for n, text in own))
        return out

    def model_answers_of(self, run_id: str) -> list[dict]:
        with self._lock:
            rows = self.db.execute("SELECT n, record FROM model_answers WHERE run_id=? AND record IS NOT NULL ORDER BY n",
                                   (run_id,)).fetchall()
        # a request journaled as a delta against an earlier one is given back whole
        return rebuilt(_record("model_answer", n, text) for n, text in rows)

    # --- the hash chain ---------------------------------------------------------------
    def chain_head(self, run_id: str) -> str | None:
        """The last link of the run's hash chain (None before its first record)."""
        with self._lock:
            row = self.db.execute("SELECT link_sha256 FROM chain WHERE run_id=? ORDER BY n DESC LIMIT 1",
                                  (run_id,)).fetchone()
        return None if row is None else row[0]

    def chain_of(self, run_id: str) -> tuple[list[Link], dict[tuple[str, int], str]]:
        """The run's links in order, and the records the journal holds now: (kind, ref) -> text."""
        with self._lock:
            links = [Link(*r) for r in self.db.execute(
                "SELECT n, kind, ref, record_sha256, link_sha256 FROM chain WHERE run_id=? ORDER BY n", (run_id,))]
            current: dict[tuple[str, int], str] = {}
            for kind, sql in (("receipt", "SELECT seq, record FROM receipts WHERE run_id=?"),
                              ("record", "SELECT n, record FROM records WHERE run_id=?"),
                              ("model_answer", "SELECT n, record FROM model_answers WHERE run_id=? AND record IS NOT NULL")):
                for ref, text in self.db.execute(sql, (run_id,)):
                    _record(kind, ref, text)  # one that does not parse is damage, not a mismatch
                    current[(kind, ref)] = text
            for n, kind, ref, text in self.db.execute(
                    "SELECT n, kind, ref, record FROM went_past WHERE run_id=?", (run_id,)):
                if kind not in ("model_answer", "receipt", "start"):
                    raise StateError(f"{describe(WENT_PAST, n)} is a '{str(kind)[:40]}', not a model answer, receipt"
                                     " or start")
                _record(kind, ref, text)
                current[(WENT_PAST, n)] = text
            for kind, sql in (("approval", "SELECT * FROM approvals WHERE run_id=? AND n IS NOT NULL"),
                              ("control", "SELECT * FROM controls WHERE run_id=? AND linked IS NOT NULL")):
                cur = self.db.execute(sql, (run_id,))
                for row in cur.fetchall():
                    text = _linked_row(cur, row)
                    current[(kind, row[[d[0] for d in cur.description].index("n")])] = text
        return links, current

    def link_holds(self, run_id: str, kind: str, ref: int | None) -> bool:
        """Whether approval request or control ``ref`` (``kind`` ``approval`` or ``control``) is,
        as it stands now, what its last link says, and that link follows from the one before it.
        False for a row journaled before such rows were links (it has no link of its own)."""
        if kind not in ("approval", "control"):
            raise ValueError(kind)
        if ref is None:
            return False
        with self._lock:
            text = linked_text(self.db, kind, run_id, ref)
            last = self.db.execute(  # kind is one of two literals: the partial index answers it
                f"SELECT n, record_sha256, link_sha256 FROM chain WHERE run_id=? AND kind='{kind}' AND ref=?"
                " ORDER BY n DESC LIMIT 1", (run_id, ref)).fetchone()
            if text is None or last is None or record_sha256(text) != last[1]:
                return False
            before = self.db.execute("SELECT link_sha256 FROM chain WHERE run_id=? AND n=?",
                                     (run_id, last[0] - 1)).fetchone()
        return link_sha256(before[0] if before else "", kind, ref, last[1]) == last[2]
