"""What a hostile or careless file, value or terminal gets from the real command: a finding or a
one-line error, never a traceback; values quoted as short excerpts with control characters
escaped; integers of any size exact; a bug in toolloop named on one line with exit 70."""

from __future__ import annotations

import json
import re
import sys

import pytest

from conftest import APP, jsonl, write

RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e]")
WIDE = 10 ** 30 + 1  # beyond 64 bits; a float would make it 1e30


def registry(tmp_path, tools: str = "", defaults: str = "tool_timeout_s: 5", echo: str = ""):
    """reg.yml with the tool 'echo' (``echo`` adds lines to it) and ``tools``, each a tool written
    as YAML lines at the indentation of a tool id."""
    text = (
        "version: 1\n"
        f"app_root: {json.dumps(str(APP))}\n"
        "subagents:\n"
        "  w:\n"
        f"    runner_defaults: {{{defaults}}}\n"
        "    tools:\n"
        "      echo:\n"
        "        callable: testapp.tools:echo\n"
        "        description: Returns its arguments.\n"
        "        input_schema: {}\n"
        "        output_schema: {}\n"
        + "".join(f"        {line}\n" for line in echo.splitlines())
        + "".join(f"      {line}\n" for line in tools.strip("\n").splitlines())
    )
    path = tmp_path / "reg.yml"
    path.write_text(text)
    return path


def no_traceback(proc) -> str:
    err = proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    return err


# ---------------------------------------------------------------------------------------------
# a registry that is not one: nothing of it is quoted beyond an excerpt


PRIVATE_KEY = ("-----BEGIN OPENSSH PRIVATE KEY-----\n"
               + "\n".join("b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW" + f"{i:04d}"
                           for i in range(400))
               + "\n-----END OPENSSH PRIVATE KEY-----\n")
PASSWD = "".join(f"user{i}:x:{1000 + i}:{1000 + i}:User {i}:/home/user{i}:/bin/bash\n" for i in range(300))
MEGABYTE = "word " * 200_000 + "\n"


@pytest.mark.parametrize("name, body, secret", [
    ("id_ed25519", PRIVATE_KEY, "zc2gtZW0399"),
    ("passwd", PASSWD, "user299"),
    ("notes.txt", MEGABYTE, "word " * 40),
    ("half.yml", "version: 1\nsubagents: " + "x" * 5000 + "\n", "x" * 81),
])
def test_a_plan_whose_registry_is_any_readable_file_quotes_only_an_excerpt(cli, tmp_path, name, body, secret):
    (tmp_path / name).write_text(body)
    write(tmp_path / "plan.yml", f"version: 1\nregistry: {name}\nsubagent: w\nmode: sequential\ncalls: []\n")
    for args in (["run", "plan.yml"], ["validate", name, "plan.yml"]):
        proc = cli(*args)
        assert proc.returncode in (1, 3), proc
        out = no_traceback(proc) + proc.stdout.decode()
        assert secret not in out
        assert max(len(line) for line in out.splitlines()) < 400, out[:2000]
        assert f"{name}:1:1: error" in out or f"{name}:2:" in out


def test_long_values_in_findings_are_clipped_to_an_excerpt(cli, tmp_path):
    long_id = "t" * 5000
    registry(tmp_path, defaults=f"tool_timeout_s: 5, allowed_tools: [{long_id}]")
    proc = cli("validate", "reg.yml")
    assert proc.returncode == 1
    out = proc.stdout.decode()
    assert "TL302" in out and "t" * 81 not in out and "t" * 79 + "…" in out


# ---------------------------------------------------------------------------------------------
# integers beyond 64 bits stay exact


def test_validate_lock_and_dry_run_keep_integers_beyond_64_bits_exact(cli, tmp_path):
    registry(tmp_path, f"""
typed:
  callable: testapp.tools:echo
  description: A bound beyond 64 bits.
  max_calls: {10 ** 25}
  input_schema: {{type: object, properties: {{n: {{type: integer, maximum: {WIDE}}}}}}}
  output_schema: {{}}
""")
    write(tmp_path / "plan.yml", f"""
        version: 1
        registry: reg.yml
        subagent: w
        mode: sequential
        calls:
          - {{tool: typed, args: {{n: {WIDE}, m: {-WIDE}}}}}
        """)
    proc = cli("validate", "reg.yml", "plan.yml")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stdout
    assert cli("lock", "reg.yml").returncode == 0
    assert len(json.loads((tmp_path / "toolloop.lock").read_text())["registries"]["reg.yml"]["tools"]) == 2
    assert cli("validate", "reg.yml", "--locked").returncode == 0
    proc = cli("run", "plan.yml", "--dry-run", "--format", "jsonl")
    no_traceback(proc)
    planned = jsonl(proc.stdout)[0]
    assert planned["args"] == {"n": WIDE, "m": -WIDE}  # json reads integers exactly
    # one more than the bound is refused: the comparison was made on the exact value
    (tmp_path / "plan.yml").write_text((tmp_path / "plan.yml").read_text().replace(str(WIDE), str(WIDE + 1), 1))
    proc = cli("validate", "reg.yml", "plan.yml")
    assert proc.returncode == 1 and "TL404" in proc.stdout.decode()


def test_lanes_with_integers_beyond_64_bits_are_admitted_exactly(cli, tmp_path):
    registry(tmp_path)
    write(tmp_path / "plan.yml", "version: 1\nregistry: reg.yml\nsubagent: w\nmode: parallel\nmax_concurrency: 2\n")
    lanes = json.dumps({"item_key": "a", "calls": [{"tool": "echo", "args": {"n": WIDE, "neg": -(2 ** 64)}}]})
    proc = cli("run", "plan.yml", "--lanes", "-", "--dry-run", "--format", "jsonl", input=lanes.encode())
    no_traceback(proc)
    assert jsonl(proc.stdout)[0]["args"] == {"n": WIDE, "neg": -(2 ** 64)}


def test_call_args_keep_integers_beyond_64_bits_exact(cli, tmp_path):
    registry(tmp_path, f"""
bounded:
  callable: testapp.tools:echo
  description: At most 10**30.
  input_schema: {{type: object, properties: {{n: {{type: integer, maximum: {10 ** 30}}}}}}}
  output_schema: {{}}
""")
    # read as a float, 10**30 + 1 would become 1e30 and pass; read exactly, it is over the bound
    proc = cli("call", "reg.yml", "w", "bounded", "--args", json.dumps({"n": 10 ** 30 + 1}))
    err = no_traceback(proc)
    assert proc.returncode == 3 and "TL404" in err and "1000000000000000000000000000001" in err


# ---------------------------------------------------------------------------------------------
# nesting beyond what any real arguments need


def test_deeply_nested_arguments_and_payloads_are_findings(cli, tmp_path):
    registry(tmp_path)
    write(tmp_path / "plan.yml", "version: 1\nregistry: reg.yml\nsubagent: w\nmode: parallel\nmax_concurrency: 2\n")
    deep = "[" * 300 + "]" * 300
    lane = '{"item_key": "a", "calls": [{"tool": "echo", "args": {"x": %s}}]}\n' % deep
    proc = cli("run", "plan.yml", "--lanes", "-", input=lane.encode())
    err = no_traceback(proc)
    assert proc.returncode == 3
    assert "-:1:1: error TL404 calls[0].args: arguments for 'echo' cannot be used: it nests deeper than 100 levels" in err
    payload = '{"item_key": "a", "payload": {"x": %s}, "calls": [{"tool": "echo"}]}\n' % deep
    proc = cli("run", "plan.yml", "--lanes", "-", input=payload.encode())
    err = no_traceback(proc)
    assert proc.returncode == 3 and "TL413 payload: the lane payload cannot be used: it nests deeper" in err
    proc = cli("call", "reg.yml", "w", "echo", "--args", '{"x": %s}' % deep)
    err = no_traceback(proc)
    assert proc.returncode == 3 and "nests deeper than 100 levels" in err
    proc = cli("call", "reg.yml", "w", "echo", "--args", '{"x": %s}' % ("[" * 3000 + "]" * 3000))
    err = no_traceback(proc)
    assert proc.returncode == 2 and "--args is not JSON: the JSON nests deeper than 1,024 levels" in err


# ---------------------------------------------------------------------------------------------
# values that a tag, a type or a shape makes unreadable: findings with file:line:col


@pytest.mark.parametrize("echo, plan_part, where, code", [
    ("timeout_s: !!int false", "", "reg.yml:12:20: error TL105", "'false' is not a whole number"),
    ("timeout_s: !!float x", "", "reg.yml:12:20: error TL105", "'x' is not a number"),
    ("cacheable: !!bool maybe", "", "reg.yml:12:20: error TL105", "'maybe' is not true or false"),
    ("redact: [/a]\ncontrol_envelope: !!int 0x", "", "reg.yml:13:27: error TL105", "'0x' is not a whole number"),
    ("", "mode: {parallel: 1}", "plan.yml:4:7: error TL203", "'mode' must be one of"),
    ("", "mode: [parallel]", "plan.yml:4:7: error TL203", "'mode' must be one of"),
])
def test_unreadable_values_are_findings_through_the_cli(cli, tmp_path, echo, plan_part, where, code):
    registry(tmp_path, echo=echo)
    write(tmp_path / "plan.yml", f"version: 1\nregistry: reg.yml\nsubagent: w\n{plan_part or 'mode: sequential'}\ncalls: []\n")
    proc = cli("validate", "reg.yml", "plan.yml")
    no_traceback(proc)
    out = proc.stdout.decode()
    assert proc.returncode == 1, out
    assert where in out and code in out, out


@pytest.mark.parametrize("schema, where", [
    ("{$schema: {a: 1}}", "reg.yml:10:33: error TL320"),
    ("{$schema: [x]}", "reg.yml:10:33: error TL320"),
    ("{$schema: 4}", "reg.yml:10:33: error TL320"),
    ("{$schema: true}", "reg.yml:10:33: error TL320"),
    ("{type: [[object]]}", "reg.yml:10:30: error TL320"),
])
def test_schemas_of_the_wrong_shape_are_findings_through_the_cli(cli, tmp_path, schema, where):
    path = registry(tmp_path, echo="redact: [/password]")
    path.write_text(path.read_text().replace("input_schema: {}", f"input_schema: {schema}"))
    proc = cli("validate", "reg.yml")
    no_traceback(proc)
    out = proc.stdout.decode()
    assert proc.returncode == 1 and where in out, out


# ---------------------------------------------------------------------------------------------
# control characters never reach the terminal raw


def test_control_characters_in_keys_are_escaped_in_findings_tables_and_errors(cli, tmp_path):
    registry(tmp_path, defaults='tool_timeout_s: 5, allowed_tools: ["ec\\e[2Jho"]', tools="""
"bad\\e]0;owned\\a":
  callable: testapp.tools:echo
  description: "Clears \\e[2J the screen"
  input_schema: {}
""")
    proc = cli("validate", "reg.yml")
    out = proc.stdout.decode()
    assert proc.returncode == 1 and not RAW_CONTROL.search(out)
    assert "'ec\\x1b[2Jho'" in out and "bad\\x1b]0;owned\\x07" in out

    registry(tmp_path)
    write(tmp_path / "plan.yml", "version: 1\nregistry: reg.yml\nsubagent: w\nmode: parallel\nmax_concurrency: 2\n")
    lanes = (json.dumps({"item_key": "k\x1b[31m[/bold]", "calls": [
        {"tool": "echo", "call_key": "c\x1b]0;x\x07[red]", "args": {"t": "\x1b[2J\u202e"}}]}) + "\n").encode()
    proc = cli("run", "plan.yml", "--lanes", "-", "--format", "table", input=lanes, env={"COLUMNS": "300"})
    table = proc.stdout.decode()
    assert proc.returncode == 0, no_traceback(proc)
    assert not RAW_CONTROL.search(table), table
    assert "k\\x1b[31m[/bold]" in table and "c\\x1b]0;x\\x07[red]" in table and "\\u202e" in table

    proc = cli("tools", "reg.yml", "--subagent", "w\x1b[2J")
    err = no_traceback(proc)
    assert proc.returncode == 2 and "unknown subagent 'w\\x1b[2J'" in err and not RAW_CONTROL.search(err)


# ---------------------------------------------------------------------------------------------
# --stream takes the same plans as a whole read


def test_stream_accepts_a_parallel_plan_without_a_lanes_key(cli, tmp_path):
    registry(tmp_path)
    write(tmp_path / "plan.yml", "version: 1\nregistry: reg.yml\nsubagent: w\nmode: parallel\nmax_concurrency: 2\n")
    lane = json.dumps({"item_key": "a", "calls": [{"tool": "echo", "args": {"i": 1}}]}).encode() + b"\n"
    for extra in ([], ["--stream"]):
        proc = cli("run", "plan.yml", "--lanes", "-", "--format", "jsonl", *extra, input=lane)
        no_traceback(proc)
        assert proc.returncode == 0, (extra, proc.stderr)
        assert [r["status"] for r in jsonl(proc.stdout)] == ["ok", "ok"]


# ---------------------------------------------------------------------------------------------
# a bug in toolloop


BUG = """
import sys

import toolloop_cli.contract.registry as registry


def broken(*args, **kwargs):
    secret = "hunter2"
    raise KeyError(secret)  # a bug, as toolloop would meet one: here in loading a registry


registry.load_registry = broken

from toolloop_cli.cli.app import main

sys.argv = ["toolloop", *sys.argv[1:]]
main()
"""


def test_an_unexpected_exception_is_one_line_naming_an_internal_error_exit_70(tmp_path):
    import os
    import subprocess

    (tmp_path / "with_a_bug.py").write_text(BUG)
    registry(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "TOOLLOOP_DEBUG"}
    proc = subprocess.run([sys.executable, "with_a_bug.py", "validate", "reg.yml"], cwd=tmp_path, env=env,
                          capture_output=True, timeout=120)
    err = proc.stderr.decode()
    assert proc.returncode == 70
    assert err.count("\n") == 1 and "Traceback" not in err and "hunter2" not in err
    assert re.match(r"toolloop: internal error: KeyError at toolloop_cli/[a-z_/]+\.py:\d+ \(", err), err
    assert "TOOLLOOP_DEBUG=1" in err and "a bug in toolloop" in err
    proc = subprocess.run([sys.executable, "with_a_bug.py", "validate", "reg.yml"], cwd=tmp_path,
                          env={**env, "TOOLLOOP_DEBUG": "1"}, capture_output=True, timeout=120)
    err = proc.stderr.decode()
    assert proc.returncode == 70
    assert "Traceback (most recent call last)" in err and "raise KeyError(secret)" in err
    assert err.splitlines()[-1].startswith("toolloop: internal error: KeyError")
