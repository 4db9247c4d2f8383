"""A model request journaled as what it adds to the run's previous request, so that a routed run
of n turns journals O(n) request text instead of O(n²).

A router request holds every earlier observation, so each request is the one before it with a
few hundred characters changed near its end (the new observation, the budgets left). The
journal's ``model_answer`` record then carries, instead of ``request`` (the whole text),

    "request_delta": {"base": N, "keep": K, "crc32": C, "text": SUFFIX}

meaning: the first K characters of the request of answer N (an earlier answer of the same run
and role), whose UTF-8 has the CRC-32 C, then SUFFIX. The check matters where a resumed run
that went another way replaced answer N after the delta was written: a request rebuilt on the
wrong base would be shown as one the run sent. Every reader of the journal (``Store.model_answers_of``: resume, replay,
fork, ``runs export`` and ``show``, ``toolloop test``) gets ``request`` rebuilt by ``rebuilt``; a
journal written before this form (whole ``request`` on every record) reads as it did.
"""

from __future__ import annotations

import zlib
from typing import Any, Iterable

#: characters compared at once while looking for where two requests part
_STRIDE = 4096


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b``: compared a stride at a time,
    then halved inside the stride that differs, so the cost is a few copies of the prefix in C
    rather than a Python step per character."""
    limit = min(len(a), len(b))
    i = 0
    while i < limit:
        j = min(i + _STRIDE, limit)
        if a[i:j] == b[i:j]:
            i = j
            continue
        lo, hi = i, j  # a[:lo] == b[:lo], they differ before hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if a[lo:mid] == b[lo:mid]:
                lo = mid
            else:
                hi = mid
        return lo
    return limit


class RequestChain:
    """The journal form of a run's requests: each as a delta against the last one this run
    journaled for the same role (a resumed run starts its chain again with a whole request).

    Given the run's scrubber, the chain also scrubs each request of the run's secrets, looking
    only where it could hold one it was not already known not to hold: a request in which the
    scrubber finds nothing leaves the next request of its role, which shares all but its end
    with it, to be searched from where the two part (less the longest secret and a character of
    context each side: one could straddle that point). A request is searched whole when the last
    one held a secret, or the scrubber is another (the run learnt a new secret: any earlier text
    may hold it)."""

    def __init__(self) -> None:
        # role -> (n, the request as journaled, the scrubber it held no secret of, or None)
        self._last: dict[Any, tuple[int, str, Any]] = {}

    def journal_form(self, record: dict[str, Any], scrubber: Any = None) -> dict[str, Any]:
        """``record`` (a ``model_answer``) with ``request`` replaced by a ``request_delta`` where
        an earlier request shares its start. Its ``request`` is as sent when ``scrubber`` (the
        run's ``Scrubber``) is given, and scrubbed here; else already scrubbed."""
        text, n = record.get("request"), record.get("n")
        if not isinstance(text, str) or not isinstance(n, int):
            return record
        role = record.get("role")
        last = self._last.get(role)
        keep = None
        clean = None
        if scrubber is not None:
            if last is not None and last[2] is scrubber:
                keep = common_prefix(last[1], text)  # the journaled text is the text sent: it held no secret
                longest = max((len(f) for f in scrubber.forms), default=0)
                clean = None if scrubber.finds(text, max(0, keep - longest - 2)) else scrubber
            else:
                clean = None if scrubber.finds(text) else scrubber
            if clean is None:
                text, keep = scrubber.text(text), None
                record = {**record, "request": text}
        self._last[role] = (n, text, clean)
        if last is None:
            return record
        if keep is None:
            keep = common_prefix(last[1], text)
        if keep == 0:
            return record
        out = {k: v for k, v in record.items() if k != "request"}
        out["request_delta"] = {"base": last[0], "keep": keep, "crc32": _crc(text[:keep]), "text": text[keep:]}
        return out


def rebuilt(answers: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's ``model_answer`` records in ``n`` order, each with its whole ``request``: a
    delta is joined to the request it names. One whose base is missing or shorter than it says
    (a damaged journal) is left without ``request``, as a recording that lacks it."""
    texts: dict[int, str] = {}
    out: list[dict[str, Any]] = []
    for rec in answers:
        delta = rec.get("request_delta")
        if isinstance(delta, dict):
            rec = {k: v for k, v in rec.items() if k != "request_delta"}
            base, keep, tail = texts.get(delta.get("base")), delta.get("keep"), delta.get("text")  # type: ignore[arg-type]
            if (base is not None and isinstance(keep, int) and 0 <= keep <= len(base) and isinstance(tail, str)
                    and delta.get("crc32") == _crc(base[:keep])):
                rec["request"] = base[:keep] + tail
        text, n = rec.get("request"), rec.get("n")
        if isinstance(text, str) and isinstance(n, int):
            texts[n] = text
        out.append(rec)
    return out


def _crc(text: str) -> int:
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))
