"""A write tool that cannot apply a payment twice: it passes toolloop's idempotency key to its
"backend" (here a JSON Lines ledger file), which refuses a key it has already seen.

The key is ``toolloop_cli.current_call().idempotency_key``: derived from the run id and the call's
place in the run, the same on every attempt and after any resume. So when a run dies while this
tool is running and ``toolloop resume RUN_ID --retry-interrupted`` runs it again on purpose, the
ledger answers with the payment it already holds instead of recording a second one.
"""

from __future__ import annotations

import json
import os

from toolloop_cli import current_call


def _ledger() -> str:
    return os.environ.get("DEMO_LEDGER", "ledger.jsonl")


def record_payment(ref: str, amount: int) -> dict:
    key = current_call().idempotency_key
    path = _ledger()
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                entry = json.loads(line)
                if entry["idempotency_key"] == key:
                    return {**entry, "replayed": True}  # applied before: answer, do not apply again
    entry = {"ref": ref, "amount": amount, "idempotency_key": key}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return {**entry, "replayed": False}
