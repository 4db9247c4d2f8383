"""``scrub_record``: one pass over a record scrubs the run's secrets from every field a tool, a
model or a person may have written (strings, and the strings and keys inside objects and lists),
leaves toolloop's own fields (ids, times, hashes, counts) and values with no string as they are,
and with no secret returns the record unchanged."""

from __future__ import annotations

from toolloop_cli.engine.redact import REDACTED, RunSecrets, Scrubber, scrub_record

SECRET = "sk-record-canary-1234"


def test_a_record_is_scrubbed_in_every_field_that_may_hold_a_secret_and_nowhere_else():
    rec = {"type": "receipt", "run_id": f"r-{SECRET}", "seq": 3, "duration_ms": 1.5, "abandoned": False,
           "error": None, "tool": f"t {SECRET}", "args": {SECRET: [SECRET, 1, None, {"k": f"a{SECRET}b"}]},
           "result": [True, 2.0, f"x {SECRET}"], "reason": SECRET}
    for secrets in (RunSecrets([SECRET]), Scrubber([SECRET])):
        out = scrub_record(rec, secrets)
        assert out == {"type": "receipt", "run_id": f"r-{SECRET}", "seq": 3, "duration_ms": 1.5, "abandoned": False,
                       "error": None, "tool": f"t {REDACTED}",
                       "args": {REDACTED: [REDACTED, 1, None, {"k": f"a{REDACTED}b"}]},
                       "result": [True, 2.0, f"x {REDACTED}"], "reason": REDACTED}
        assert rec["reason"] == SECRET  # a copy: the record given is not changed
    assert scrub_record(rec, RunSecrets()) is rec
