"""The journal's schema: the ordered migrations that make it, and the check that a database
holds every table and column its version promises.

The schema carries its version in ``PRAGMA user_version``; ``db.Database`` brings it up to date
when the database is opened, and refuses one written by a newer toolloop rather than guess at it.
"""

from __future__ import annotations

import sqlite3
from typing import Any

# Each entry brings the schema from version i to i + 1; append, never edit a shipped entry.
MIGRATIONS: list[tuple[str, ...]] = [
    (  # 1: the first journal layout
        """CREATE TABLE IF NOT EXISTS runs (
            run_id TEXT PRIMARY KEY,
            mode TEXT NOT NULL,
            status TEXT NOT NULL,
            plan_path TEXT NOT NULL,
            plan_sha256 TEXT NOT NULL,
            registry_path TEXT NOT NULL,
            contract_sha256 TEXT NOT NULL,
            options TEXT NOT NULL,
            parallel_batch_id TEXT,
            total_calls INTEGER NOT NULL DEFAULT 0,
            counts TEXT,
            summary TEXT,
            started_at REAL NOT NULL,
            finished_at REAL,
            lease_owner TEXT,
            lease_until REAL
        )""",
        """CREATE TABLE IF NOT EXISTS lanes (
            run_id TEXT NOT NULL,
            lane INTEGER NOT NULL,
            item_key TEXT,
            payload TEXT,
            PRIMARY KEY (run_id, lane)
        )""",
        # args is NULL when the arguments held a redacted value, or come from the lane payload
        """CREATE TABLE IF NOT EXISTS calls (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            lane INTEGER NOT NULL,
            item_key TEXT,
            call_key TEXT NOT NULL,
            tool TEXT NOT NULL,
            args TEXT,
            args_sha256 TEXT,
            PRIMARY KEY (run_id, seq)
        )""",
        """CREATE TABLE IF NOT EXISTS starts (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            started_at REAL NOT NULL,
            PRIMARY KEY (run_id, seq)
        )""",
        """CREATE TABLE IF NOT EXISTS receipts (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            status TEXT NOT NULL,
            record TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        )""",
        """CREATE TABLE IF NOT EXISTS cache (
            key TEXT PRIMARY KEY,
            tool TEXT NOT NULL,
            result TEXT NOT NULL,
            created_at REAL NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS decisions (
            run_id TEXT NOT NULL,
            iteration INTEGER NOT NULL,
            record TEXT NOT NULL,
            PRIMARY KEY (run_id, iteration)
        )""",
        """CREATE TABLE IF NOT EXISTS model_answers (
            run_id TEXT NOT NULL,
            n INTEGER NOT NULL,
            role TEXT NOT NULL,
            request_sha256 TEXT NOT NULL,
            answer TEXT NOT NULL,
            PRIMARY KEY (run_id, n)
        )""",
        # state: pending | approved | rejected | used | expired (an MCP server stopped before an answer)
        """CREATE TABLE IF NOT EXISTS approvals (
            run_id TEXT NOT NULL,
            item_key TEXT NOT NULL DEFAULT '',
            call_key TEXT NOT NULL,
            args_sha256 TEXT NOT NULL,
            state TEXT NOT NULL,
            args TEXT,
            message TEXT,
            PRIMARY KEY (run_id, item_key, call_key)
        )""",
    ),
    (  # 2: a lane payload holding a redacted value is withheld; its hash lets resume check the rebuilt one
        "ALTER TABLE lanes ADD COLUMN payload_sha256 TEXT",
    ),
    (  # 3: lanes spooled from a stream are read back a page of lanes at a time
        "CREATE INDEX IF NOT EXISTS calls_by_lane ON calls (run_id, lane, seq)",
    ),
    (  # 4: output records other than receipts (a routed loop's decisions, supervisor and guardrail
       # records), in commit order, each with the number of receipts printed before it
        """CREATE TABLE IF NOT EXISTS records (
            run_id TEXT NOT NULL,
            n INTEGER NOT NULL,
            type TEXT NOT NULL,
            receipts_before INTEGER NOT NULL,
            record TEXT NOT NULL,
            PRIMARY KEY (run_id, n)
        )""",
        "ALTER TABLE model_answers ADD COLUMN record TEXT",
    ),
    (  # 5: operators' steer and abort for a run, read by the run before its next turn
        """CREATE TABLE IF NOT EXISTS controls (
            run_id TEXT NOT NULL,
            n INTEGER NOT NULL,
            kind TEXT NOT NULL,
            message TEXT,
            at REAL NOT NULL,
            consumed_at INTEGER,
            PRIMARY KEY (run_id, n)
        )""",
    ),
    (  # 6: who answered an approval request, and when it was asked and answered
        "ALTER TABLE approvals ADD COLUMN approver TEXT",
        "ALTER TABLE approvals ADD COLUMN requested_at REAL",
        "ALTER TABLE approvals ADD COLUMN answered_at REAL",
    ),
    (  # 7: a run's labels and the contract it used (the registry declaration as data), and the
       # hash chain over each run's records in commit order (see chain.py)
        "ALTER TABLE runs ADD COLUMN labels TEXT",
        "ALTER TABLE runs ADD COLUMN contract TEXT",
        """CREATE TABLE IF NOT EXISTS chain (
            run_id TEXT NOT NULL,
            n INTEGER NOT NULL,
            kind TEXT NOT NULL,
            ref INTEGER NOT NULL,
            record_sha256 TEXT NOT NULL,
            link_sha256 TEXT NOT NULL,
            PRIMARY KEY (run_id, n)
        )""",
    ),
    (  # 8: a streamed lane's item key is looked up in the journal, not kept in memory
        "CREATE INDEX IF NOT EXISTS lanes_by_item_key ON lanes (run_id, item_key)",
    ),
    (  # 9: approval requests and answers and operator controls are links of the run's hash chain:
       # a request's number in its run is its ref; NULL (and a control's NULL ``linked``) marks a
       # row journaled before they were, which is never acted on without a link of its own
        "ALTER TABLE approvals ADD COLUMN n INTEGER",
        "ALTER TABLE controls ADD COLUMN linked INTEGER",
        # a request's or a control's last link is found without reading the run's receipts' links
        "CREATE INDEX IF NOT EXISTS chain_approvals ON chain (run_id, ref, n) WHERE kind='approval'",
        "CREATE INDEX IF NOT EXISTS chain_controls ON chain (run_id, ref, n) WHERE kind='control'",
    ),
    (  # 10: each attempt to tell someone about a run (``notify``): not links of the run's hash chain
        """CREATE TABLE IF NOT EXISTS notifications (
            run_id TEXT NOT NULL,
            n INTEGER NOT NULL,
            record TEXT NOT NULL,
            PRIMARY KEY (run_id, n)
        )""",
    ),
    (  # 11: the model answers and receipts an earlier attempt of a routed run journaled past the
       # point where a resumed run went another way: not the run's, but kept (a receipt records an
       # effect that happened), in the order they were moved; each is a link of the run's chain
        """CREATE TABLE IF NOT EXISTS went_past (
            run_id TEXT NOT NULL,
            n INTEGER NOT NULL,
            kind TEXT NOT NULL,
            ref INTEGER NOT NULL,
            record TEXT NOT NULL,
            at REAL NOT NULL,
            PRIMARY KEY (run_id, n)
        )""",
    ),
]

SCHEMA_VERSION = len(MIGRATIONS)


_EXPECTED: dict[tuple, dict[str, list[str]]] = {}


def expected_schema(migrations: list[tuple[str, ...]]) -> dict[str, list[str]]:
    """Tables and their columns as ``migrations`` make them (worked out once, in memory)."""
    key = tuple(tuple(m) for m in migrations)
    if key not in _EXPECTED:
        con = sqlite3.connect(":memory:")
        try:
            for step in migrations:
                for stmt in step:
                    con.execute(stmt)
            _EXPECTED[key] = _schema(con)
        finally:
            con.close()
    return _EXPECTED[key]


def _schema(con: Any) -> dict[str, list[str]]:
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'"
                                        " AND name NOT LIKE 'sqlite_%' ORDER BY name")]
    return {t: [r[1] for r in con.execute("PRAGMA table_info(\"" + t.replace('"', '""') + "\")")] for t in tables}


def schema_problem(con: Any, migrations: list[tuple[str, ...]]) -> str | None:
    """What is missing from the database's tables (a table dropped or renamed, a column gone),
    or None when it has every table and column its schema version promises."""
    have = _schema(con)
    for table, columns in expected_schema(migrations).items():
        if table not in have:
            return f"its table '{table}' is missing"
        gone = [c for c in columns if c not in have[table]]
        if gone:
            return f"its table '{table}' has no column '{gone[0]}'"
    return None
