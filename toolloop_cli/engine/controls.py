"""Operators' steer and abort as a run reads them from the journal (``toolloop steer`` / ``abort``,
the web page): acted on only when the control's link in the run's hash chain holds, so a control
written or changed in the database by hand is ignored, with a warning."""

from __future__ import annotations

from typing import Any, Callable


def control_holds(store: Any, run_id: str, n: int, kind: str, warn: Callable[[str], None] | None) -> bool:
    """Whether control ``n`` of the run may be acted on."""
    check = getattr(store, "link_holds", None)  # a store of an App's own may keep no chain
    if check is None or check(run_id, "control", n):
        return True
    if warn is not None:
        warn(f"operator control {n} ({kind}) of run {run_id} has no link in the run's hash chain that holds (it was"
             " written or changed in the database, or by a toolloop before controls were links): ignored;"
             f" see 'toolloop runs verify {run_id}'")
    return False
