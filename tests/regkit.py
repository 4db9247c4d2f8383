"""Registry and profile text for tests: the test App's usual tools, each declared in one place.

``registry_yaml("echo", "write_file")`` is a whole registry file of those tools under subagent
``t``; ``openai_profile(base_url)`` the profile of the loopback model server."""

from __future__ import annotations

from conftest import APP

_KEYED = "{type: object, required: [log, key], properties: {log: {type: string}, key: {type: string}}}"
_SLOW = ("{type: object, required: [log, key], properties: {log: {type: string}, key: {type: string}, "
         "seconds: {type: number}}}")
_PATH = "{type: object, required: [path], properties: {path: {type: string}}}"
_LOGIN = "{type: object, required: [user, password], properties: {user: {type: string}, password: {type: string}}}"

#: each tool's declaration, as the lines under its name
TOOLS: dict[str, str] = {
    "echo": """
        callable: testapp.tools:echo
        description: Returns the arguments it got.
        input_schema: {type: object}
        output_schema: {}""",
    "boom": """
        callable: testapp.tools:boom
        description: Always raises.
        input_schema: {type: object}
        output_schema: {}""",
    "boom_async": """
        callable: testapp.tools:boom_async
        description: Always raises, on the event loop.
        input_schema: {type: object}
        output_schema: {}""",
    "write_file": f"""
        callable: testapp.tools:marker
        description: Writes a file; a person approves every call.
        effect: write
        approval: required
        input_schema: {_PATH}
        output_schema: {{}}""",
    "login": f"""
        callable: testapp.tools:secret_echo
        description: Takes a password.
        redact: [/password, /token]
        input_schema: {_LOGIN}
        output_schema: {{}}""",
    "log_run": f"""
        callable: testapp.tools:log_run
        description: Logs each execution to a file.
        input_schema: {_KEYED}
        output_schema: {{type: object, required: [key]}}""",
    "log_gated": f"""
        callable: testapp.tools:log_run
        description: Logs its key to a file; a person approves every call.
        effect: write
        approval: required
        input_schema: {_KEYED}
        output_schema: {{}}""",
    "flaky": """
        callable: testapp.tools:log_fail_once
        description: Fails the first time.
        input_schema: {type: object}
        output_schema: {}""",
    "log_gate": """
        callable: testapp.tools:log_gate
        description: Logs its key, then waits until the file gate exists.
        input_schema: {type: object, required: [log, key, gate], properties: {log: {type: string}, key: {type: string}, gate: {type: string}}}
        output_schema: {}""",
    "whoami": """
        callable: testapp.tools:whoami
        description: The process it runs in.
        input_schema: {type: object}
        output_schema: {}""",
    "slow_read": f"""
        callable: testapp.tools:log_run_async
        description: Logs its key, then sleeps on the event loop.
        input_schema: {_SLOW}
        output_schema: {{}}""",
    "nap": """
        callable: testapp.tools:sleep_async
        description: Sleeps on the event loop.
        input_schema: {type: object, required: [seconds], properties: {seconds: {type: number}}}
        output_schema: {}""",
    "research": """
        plan: research.yml
        description: Research one question and return an answer.""",
    "slow_write": f"""
        callable: testapp.tools:log_run_async
        description: Logs its key, then sleeps on the event loop; a write.
        effect: write  # toolloop: ignore[TL353] (nothing to approve in a test)
        input_schema: {_SLOW}
        output_schema: {{}}""",
}


def registry_yaml(*tools: str, subagent: str = "t", tool_timeout_s: int = 10, max_depth: int | None = None,
                  extra: dict[str, str] | None = None) -> str:
    """A registry file declaring ``tools`` (names of ``TOOLS``) under one subagent; ``max_depth``
    allows child plans (the ``research`` tool runs ``research.yml``), and ``extra`` adds lines to a
    tool's declaration (``{"research": "timeout_s: 5"}``)."""
    defaults = f"tool_timeout_s: {tool_timeout_s}" + (f", max_depth: {max_depth}" if max_depth is not None else "")
    lines = ["version: 1", f"app_root: {APP}", "subagents:", f"  {subagent}:",
             f"    runner_defaults: {{{defaults}}}", "    tools:"]
    for name in tools:
        lines.append(f"      {name}:")
        body = TOOLS[name].strip("\n").splitlines() + (extra or {}).get(name, "").splitlines()
        lines.extend("        " + line.strip() for line in body if line.strip())
    return "\n".join(lines) + "\n"


def openai_profile(base_url: str, key_env: str = "TL_TEST_KEY") -> str:
    """A flow-style profile for the OpenAI-compatible model server at ``base_url``."""
    return f"{{provider: openai, model: m, base_url: '{base_url}', api_key_env: {key_env}}}"


def routed_plan_yaml(profile: str, goal: str, *, pause_on_no_progress: bool = False, registry: str = "reg.yml") -> str:
    """A routed plan for subagent ``t`` whose router and final answer both use ``profile``, under
    budgets no test reaches; ``pause_on_no_progress`` adds a supervisor that pauses the run when a
    result repeats the one before."""
    text = f"""version: 1
registry: {registry}
subagent: t
mode: routed
goal: {goal}
router_profile: {profile}
final_profile: {profile}
budget: {{max_iterations: 6, max_tokens: 100000, max_tool_calls: 6, timeout_s: 60}}
final_schema: {{type: object, required: [answer]}}
"""
    if pause_on_no_progress:
        text += "supervisor:\n  rules:\n    - {when: no_progress, count: 1}\n  on_violation: pause\n"
    return text


class RecordSink:
    """A run's sink (``Launch.start``) that keeps every record it is given, in order, in ``got``."""

    def __init__(self) -> None:
        self.got: list[dict] = []

    def write(self, record: dict, line: bytes | None = None) -> None:
        self.got.append(record)

    def flush(self) -> None:
        pass


def state_rows(tmp_path, sql: str) -> list[tuple]:
    """The rows ``sql`` selects from the journal of the CLI run in ``tmp_path`` (its ``.toolloop``)."""
    import sqlite3

    db = sqlite3.connect(tmp_path / ".toolloop" / "state.db")
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def recorded_suite(folder, export: bytes, expect: str) -> None:
    """``suite.yml`` in ``folder``: one case, ``recorded``, of ``plan.yml`` with ``tools: recorded``
    over ``export`` (written as its fixture, ``fixture.jsonl``), expecting ``expect`` (YAML flow)."""
    from conftest import write

    write(folder / "fixture.jsonl", export.decode())
    write(folder / "suite.yml", f"""
        version: 1
        kind: suite
        cases:
          - name: recorded
            plan: plan.yml
            fixture: fixture.jsonl
            tools: recorded
            expect: {expect}
    """)
