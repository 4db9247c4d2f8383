"""Run ids for shell completion: the completion scripts run ``toolloop __complete-run-ids`` on
every TAB after a command that takes a RUN_ID, so it reads the journal and nothing else: it opens
``state.db`` read-only (never creating the state folder or the database), prints the newest ids
first, and prints nothing when there is no journal or it cannot be read."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

#: the most ids offered (the newest ones)
MOST = 200


def complete_run_ids(
    prefix: Optional[str] = typer.Argument(None, metavar="PREFIX", help="Only ids that start with this."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", metavar="DIR", help="Folder of state.db."),
) -> None:
    """Print run ids from the journal, newest first, for shell completion."""
    import os
    import sqlite3
    import sys
    from urllib.parse import quote

    folder = state_dir or Path(os.environ.get("TOOLLOOP_STATE_DIR") or ".toolloop")
    db = folder / "state.db"
    if not db.is_file():
        return
    try:
        con = sqlite3.connect(f"file:{quote(str(db.resolve()))}?mode=ro", uri=True, timeout=0.2)
        try:
            rows = con.execute("SELECT run_id FROM runs WHERE run_id LIKE ? ESCAPE '\\' ORDER BY started_at DESC"
                               " LIMIT ?", (_like(prefix or "") + "%", MOST)).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return  # a journal being written, locked or damaged: nothing to offer this time
    sys.stdout.write("".join(f"{rid}\n" for (rid,) in rows if isinstance(rid, str) and rid.isprintable()))


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
