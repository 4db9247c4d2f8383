"""Sandboxed calls (``isolation: sandbox``), for real under bubblewrap: each test makes the tool try
what the sandbox forbids (reach a server on 127.0.0.1, write outside its folders, read a secret
from the environment, outlive its timeout or toolloop itself) and checks on the host that it did
not happen, not only that the receipt says so. Where no sandbox can be made (bwrap pointed at a
missing or failing program), plans are refused, or run unconfined and say so.

These tests need bwrap and user namespaces (``.ci/run`` installs Debian's ``bubblewrap``); without
them they fail with the reason, never skip."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import ROOT, jsonl, write
from test_calls_common import run_plan
from toolloop_cli.contract.registry import load_registry
from toolloop_cli.contract.sandbox import BWRAP_ENV, availability
from toolloop_cli.errors import ConfigError
from toolloop_cli.plan.admit import admit_plan
from toolloop_cli.record_schema import ReceiptRecord

# The App's tools, written into each test's App root. The module name is the same everywhere, and
# so is its text, so the copy a registry imports in this process does not matter.
TOOLS = textwrap.dedent('''
    import ctypes, os, socket, subprocess, sys, time

    def environment():
        def raw(path):
            try:
                with open(path, "rb") as f:
                    return f.read().decode("utf-8", "replace")
            except OSError as exc:
                return "unreadable: " + exc.strerror
        return {"environ": dict(os.environ), "self": raw("/proc/self/environ"), "first": raw("/proc/1/environ")}

    def connect(port):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(b"reached")
            return "connected"
        except OSError as exc:
            return "failed: " + str(exc)

    def namespaces(parent_pid):
        return {"ns": {n: os.readlink("/proc/self/ns/" + n) for n in ("net", "pid", "ipc", "uts")},
                "interfaces": sorted(name for _, name in socket.if_nameindex()),
                "sees_parent": os.path.exists("/proc/%d" % parent_pid)}

    def write(path, text="x"):
        try:
            with open(path, "w") as f:
                f.write(text)
            return "written"
        except OSError as exc:
            return "refused: " + exc.strerror

    def remount_then_write(path):
        # root in a user namespace that kept its capabilities could make the read-only root writable
        libc = ctypes.CDLL(None, use_errno=True)
        MS_REMOUNT, MS_BIND = 32, 4096
        rc = libc.mount(b"none", b"/", None, MS_REMOUNT | MS_BIND, None)
        return {"remount": "done" if rc == 0 else os.strerror(ctypes.get_errno()), "write": write(path)}

    def tmp(marker, path):
        return {"listing": sorted(os.listdir("/tmp")), "sees_marker": os.path.exists(marker), "write": write(path)}

    CHILD = ("import os, sys, time\\n"
             "open(os.path.join(sys.argv[1], 'child-started'), 'w').close()\\n"
             "if len(sys.argv) > 3:\\n"
             "    with open(sys.argv[3], 'w') as f: f.write('ready')\\n"
             "time.sleep(3600)\\n"
             "open(os.path.join(sys.argv[1], 'child-late'), 'w').close()\\n")

    def spawn_and_hang(folder, token, fifo=None):
        # a child in a session of its own: out of the worker's process group, still in the sandbox
        subprocess.Popen([sys.executable, "-c", CHILD, folder, token] + ([fifo] if fifo else []),
                         start_new_session=True)
        while not os.path.exists(os.path.join(folder, "child-started")):
            time.sleep(0.005)
        time.sleep(3600)
''')


@pytest.fixture(autouse=True)
def _bwrap_works(monkeypatch):
    monkeypatch.delenv(BWRAP_ENV, raising=False)
    bwrap, why = availability()
    assert bwrap is not None, f"these tests need a working bwrap (apt-get install bubblewrap): {why}"


@pytest.fixture
def app_root():
    """An App root outside /tmp (the sandbox's /tmp is a private one), with a writable ``out``."""
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else str(Path.home())
    root = Path(tempfile.mkdtemp(prefix="toolloop-sandbox-", dir=base))
    (root / "sbxtools.py").write_text(TOOLS)
    (root / "out").mkdir()
    yield root
    shutil.rmtree(root, ignore_errors=True)


def tool(fn: str, **extra) -> dict:
    return {"callable": f"sbxtools:{fn}", "description": fn, "input_schema": {}, "output_schema": {}, **extra}


def sandboxed(fn: str, timeout_s: float = 60, **sandbox) -> dict:
    return tool(fn, isolation="sandbox", timeout_s=timeout_s, sandbox=sandbox)


def files(folder: Path, root: Path, tools: dict, calls: list[dict]) -> Path:
    reg = write(folder / "reg.yml", json.dumps({"version": 1, "app_root": str(root), "subagents": {
        "s": {"runner_defaults": {"tool_timeout_s": 60}, "tools": tools}}}))
    return write(folder / "plan.yml", json.dumps({"version": 1, "registry": str(reg), "subagent": "s",
                                                  "mode": "sequential", "calls": calls}))


def run(root: Path, tools: dict, calls: list[dict]) -> list[dict]:
    """Receipts of a sequential plan run in this process (real clock: real processes)."""
    try:
        plan = admit_plan(files(root, root, tools, calls))
    except ConfigError as exc:
        raise AssertionError([f"{p.code} {p.message}" for p in exc.problems]) from None
    got, _, _ = run_plan(plan, mock=False)
    for r in got:
        ReceiptRecord.model_validate(r)  # every receipt fits the published schema
    return got


@contextmanager
def listener():
    """A real server on 127.0.0.1, outside any sandbox."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.setblocking(False)
    try:
        yield srv, srv.getsockname()[1]
    finally:
        srv.close()


def with_token(token: str) -> list[int]:
    """Processes on the host whose command line holds ``token``."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if token.encode() in f.read():
                        pids.append(int(name))
            except OSError:
                pass
    return pids


# --- network ----------------------------------------------------------------------------------


def test_a_sandboxed_tool_cannot_reach_a_server_on_the_hosts_loopback(app_root):
    with listener() as (srv, port):
        got = run(app_root, {"c": sandboxed("connect")}, [{"tool": "c", "args": {"port": port}}])
        assert got[0]["status"] == "ok", got[0]
        assert got[0]["result"].startswith("failed:"), got[0]["result"]
        with pytest.raises(BlockingIOError):
            srv.accept()  # nothing ever knocked
    assert got[0]["isolation"] == {"kind": "bwrap", "network": "none", "writable": [], "env": []}


def test_network_none_leaves_only_a_loopback_and_network_host_reaches_the_server(app_root):
    with listener() as (srv, port):
        got = run(app_root, {"none": sandboxed("namespaces"), "host": sandboxed("connect", network="host")},
                  [{"tool": "none", "args": {"parent_pid": os.getpid()}}, {"tool": "host", "args": {"port": port}}])
        assert got[0]["result"]["interfaces"] == ["lo"]
        assert got[1]["result"] == "connected"
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(30)
            assert conn.recv(64) == b"reached"
    assert got[1]["isolation"]["network"] == "host"


def test_the_sandbox_has_its_own_network_pid_ipc_and_uts_namespaces(app_root):
    got = run(app_root, {"none": sandboxed("namespaces"), "host": sandboxed("namespaces", network="host")},
              [{"tool": "none", "args": {"parent_pid": os.getpid()}},
               {"tool": "host", "args": {"parent_pid": os.getpid()}}])
    mine = {n: os.readlink(f"/proc/self/ns/{n}") for n in ("net", "pid", "ipc", "uts")}
    none, host = got[0]["result"], got[1]["result"]
    assert all(none["ns"][n] != mine[n] for n in mine), (none["ns"], mine)
    assert host["ns"]["net"] == mine["net"]  # network: host keeps the host's network namespace
    assert all(host["ns"][n] != mine[n] for n in ("pid", "ipc", "uts"))
    assert none["sees_parent"] is False and host["sees_parent"] is False  # toolloop is not in its /proc


# --- file system ------------------------------------------------------------------------------


def test_a_sandboxed_tool_writes_only_in_its_writable_folders(app_root):
    got = run(app_root, {"w": sandboxed("write", writable=["out"]), "r": sandboxed("remount_then_write",
                                                                                writable=["out"])},
              [{"tool": "w", "args": {"path": str(app_root / "out" / "inside.txt"), "text": "kept"}},
               {"tool": "w", "args": {"path": str(app_root / "outside.txt")}},
               {"tool": "r", "args": {"path": str(app_root / "remounted.txt")}}])
    assert got[0]["result"] == "written" and (app_root / "out" / "inside.txt").read_text() == "kept"
    assert got[1]["result"] == "refused: Read-only file system"
    assert not (app_root / "outside.txt").exists()
    assert got[2]["result"]["remount"] == "Operation not permitted"  # no capability left to remount with
    assert got[2]["result"]["write"] == "refused: Read-only file system"
    assert not (app_root / "remounted.txt").exists()
    assert got[0]["isolation"] == {"kind": "bwrap", "network": "none", "writable": ["out"], "env": []}


def test_tmp_is_private_and_empty(app_root):
    marker = Path("/tmp") / f"toolloop-host-{uuid.uuid4().hex}"
    marker.write_text("on the host")
    inside = f"/tmp/toolloop-inside-{uuid.uuid4().hex}"
    try:
        got = run(app_root, {"t": sandboxed("tmp")}, [{"tool": "t", "args": {"marker": str(marker), "path": inside}}])
    finally:
        marker.unlink()
    result = got[0]["result"]
    # empty, but for folders toolloop binds back read-only when they lie under /tmp (the App root,
    # this package, the interpreter, the current folder); none does in this test unless the checkout does
    needed = {Path(os.path.realpath(p)).parts[2] for p in (app_root, ROOT, sys.prefix, sys.base_prefix,
                                                            os.path.dirname(sys.executable), os.getcwd())
              if os.path.realpath(p).startswith("/tmp/")}
    assert set(result["listing"]) == needed
    assert result["sees_marker"] is False
    assert result["write"] == "written" and not os.path.exists(inside)  # written in the private /tmp only


def test_writable_folders_must_exist_below_app_root(app_root, tmp_path):
    (app_root / "link").symlink_to(tmp_path)
    reg = write(app_root / "reg.yml", json.dumps({"version": 1, "app_root": str(app_root), "subagents": {"s": {
        "runner_defaults": {"tool_timeout_s": 5}, "tools": {
            "t": sandboxed("write", writable=["missing", "/etc", "..", "link", "out"])}}}}))
    contract, problems = load_registry(reg)
    assert contract is None
    said = sorted((p.code, p.path, p.message.split(", ")[-1].split(" (")[0]) for p in problems if p.level == "error")
    assert said == [
        ("TL319", "subagents.s.tools.t.sandbox.writable[0]", "which is not a folder"),
        ("TL319", "subagents.s.tools.t.sandbox.writable[1]", "an absolute path"),
        ("TL319", "subagents.s.tools.t.sandbox.writable[2]", "which lies outside app_root"),
        ("TL319", "subagents.s.tools.t.sandbox.writable[3]", "which lies outside app_root"),
    ]


# --- environment ------------------------------------------------------------------------------


def test_a_sandboxed_tool_sees_only_path_home_and_the_listed_variables(app_root, monkeypatch):
    monkeypatch.setenv("TOOLLOOP_TEST_SECRET", "s3cr3t-in-the-parent")
    monkeypatch.setenv("SBX_LISTED", "listed-value")
    got = run(app_root, {"e": sandboxed("environment", env=["SBX_LISTED", "SBX_NOT_SET"])},
              [{"tool": "e", "args": {}}])
    result = got[0]["result"]
    assert result["environ"] == {"PATH": os.environ["PATH"], "HOME": "/tmp", "SBX_LISTED": "listed-value"}
    # nor in the process's initial environment, nor in the sandbox's first process (bwrap's own)
    assert "s3cr3t-in-the-parent" not in json.dumps(result)
    assert "SBX_LISTED=listed-value" in result["first"]
    assert got[0]["isolation"]["env"] == ["SBX_LISTED", "SBX_NOT_SET"]


# --- timeouts and the parent's end ------------------------------------------------------------


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
def test_at_the_timeout_everything_the_tool_started_is_gone(app_root, isolation):
    """A child in a session of its own escapes the worker's process group: under isolation:
    process it outlives the call (the documented limit), in a sandbox it ends with the sandbox."""
    token = f"toolloop-child-{uuid.uuid4().hex}"
    spec = sandboxed("spawn_and_hang", timeout_s=5, writable=["out"]) if isolation == "sandbox" else tool(
        "spawn_and_hang", isolation="process", timeout_s=5)
    try:
        got = run(app_root, {"h": spec}, [{"tool": "h", "args": {"folder": str(app_root / "out"), "token": token}}])
        assert (got[0]["status"], got[0]["abandoned"]) == ("timeout", False)
        assert (app_root / "out" / "child-started").exists()  # the child did run
        left = with_token(token)
        if isolation == "sandbox":
            assert left == []  # at the receipt, nothing the call started is left
        else:
            assert len(left) == 1
    finally:
        for pid in with_token(token):
            os.kill(pid, signal.SIGKILL)


def test_a_long_call_outlives_the_thread_that_started_its_worker(app_root, monkeypatch):
    """The parent-death signal bwrap arms follows the thread that started it, and trio retires
    idle worker threads (after 10 s; sooner here): the sandbox must not go with such a thread."""
    import trio._core._thread_cache as thread_cache

    monkeypatch.setattr(thread_cache, "IDLE_TIMEOUT", 0.1)
    (app_root / "napsbx.py").write_text("import time\n\ndef nap(seconds):\n    time.sleep(seconds)\n    return 'woke'\n")
    got = run(app_root, {"n": {**sandboxed("write"), "callable": "napsbx:nap"}}, [{"tool": "n", "args": {"seconds": 3}}])
    assert (got[0]["status"], got[0]["result"]) == ("ok", "woke"), got[0]["error"]


def test_the_sandbox_dies_with_toolloop(tmp_path):
    """toolloop killed outright (no cleanup of its own): the sandbox, and what the tool started in
    it, end with it. The App root is under /tmp here, so it is bound back into the private /tmp."""
    root = tmp_path / "app"
    root.mkdir()
    (root / "sbxtools.py").write_text(TOOLS)
    (root / "out").mkdir()
    fifo = root / "out" / "ready"
    os.mkfifo(fifo)
    token = f"toolloop-child-{uuid.uuid4().hex}"
    plan = files(tmp_path, root, {"h": sandboxed("spawn_and_hang", timeout_s=600, writable=["out"])},
                 [{"tool": "h", "args": {"folder": str(root / "out"), "token": token, "fifo": str(fifo)}}])
    env = {k: v for k, v in os.environ.items() if k != "TOOLLOOP_STATE_DIR"}
    proc = subprocess.Popen([sys.executable, "-m", "toolloop_cli", "run", str(plan), "--format", "jsonl"],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pidfds: list[int] = []
    inside: list[int] = []
    try:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            ready, _, _ = select.select([fd], [], [], 120)  # the tool's child writes once it runs
            assert ready and os.read(fd, 16) == b"ready"
        finally:
            os.close(fd)
        # the sandbox's processes (bwrap's two, the tool's child) name the App folder or the token
        inside = [pid for pid in with_token(str(root)) + with_token(token) if pid != proc.pid]
        assert inside, "no sandbox process found"
        pidfds = [os.pidfd_open(pid) for pid in set(inside)]
        proc.kill()
        proc.wait()
        waiting = set(pidfds)  # each descriptor turns readable when its process has ended
        deadline = time.monotonic() + 60
        while waiting and time.monotonic() < deadline:
            ended, _, _ = select.select(list(waiting), [], [], max(0.0, deadline - time.monotonic()))
            waiting -= set(ended)
        assert not waiting, "a sandbox process outlived toolloop"
        assert with_token(token) == []
    finally:
        proc.kill()
        proc.wait()
        for fd in pidfds:
            os.close(fd)
        for pid in set(with_token(token)) | set(inside):  # a failed test leaves nothing running either
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# --- receipts ---------------------------------------------------------------------------------


def test_isolation_is_null_for_other_tools_and_kept_on_receipts_of_calls_that_did_not_run(app_root):
    got = run(app_root, {"t": tool("write"), "p": tool("write", isolation="process"),
                         "w": sandboxed("write", writable=["out"])},
              [{"tool": "t", "args": {"path": str(app_root / "a")}},
               {"tool": "p", "args": {"path": str(app_root / "b")}},
               {"tool": "w", "args": {"path": str(app_root / "c")}},  # refused: the tool returns it
               {"tool": "w", "args": {"path": str(app_root / "out" / "n"), "text": 1}},  # raises TypeError
               {"tool": "w", "args": {"path": str(app_root / "out" / "d")}}])
    assert [r["isolation"] for r in got[:2]] == [None, None]
    applied = {"kind": "bwrap", "network": "none", "writable": ["out"], "env": []}
    assert [(r["status"], r["isolation"]) for r in got[2:]] == [("ok", applied), ("error", applied),
                                                                 ("skipped", applied)]


# --- where no sandbox can be made -------------------------------------------------------------


def _tool_ran(root: Path) -> bool:
    return (root / "out" / "ran").exists()


def test_a_plan_needing_a_sandbox_that_cannot_be_made_is_refused(cli, app_root, tmp_path):
    plan = files(tmp_path, app_root, {"w": sandboxed("write", writable=["out"])},
                 [{"tool": "w", "args": {"path": str(app_root / "out" / "ran")}}])
    proc = cli("run", str(plan), "--format", "jsonl", env={BWRAP_ENV: str(tmp_path / "no-bwrap")})
    err = proc.stderr.decode()
    assert proc.returncode == 3, err
    assert "error TL423" in err and "tool 'w' needs a sandbox" in err and "which is not a program" in err
    assert "apt-get install bubblewrap" in err and "user namespaces" in err and "required: false" in err
    assert jsonl(proc.stdout)[-1]["status"] == "rejected"
    assert not _tool_ran(app_root)
    # validate: the plan's use is an error, the registry alone a warning
    proc = cli("validate", str(plan), env={BWRAP_ENV: str(tmp_path / "no-bwrap")})
    assert proc.returncode == 1 and "error TL423" in proc.stdout.decode() + proc.stderr.decode()
    proc = cli("validate", str(tmp_path / "reg.yml"), env={BWRAP_ENV: str(tmp_path / "no-bwrap")})
    out = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 0 and "warning TL380" in out and "a plan that uses it is refused" in out


def test_namespaces_refused_are_a_reason_too(app_root, tmp_path, monkeypatch):
    fake = write(tmp_path / "bwrap", "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, likely"
                 " because the kernel does not allow non-privileged user namespaces' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv(BWRAP_ENV, str(fake))
    with pytest.raises(ConfigError) as exc:
        admit_plan(files(tmp_path, app_root, {"w": sandboxed("write")}, [{"tool": "w", "args": {"path": "x"}}]))
    [p] = [p for p in exc.value.problems if p.code == "TL423"]
    assert p.message.endswith("bwrap could not make a sandbox here: bwrap: No permissions to creating new namespace,"
                              " likely because the kernel does not allow non-privileged user namespaces")
    assert "kernel.unprivileged_userns_clone=1" in p.hint


def test_required_false_runs_unconfined_and_the_receipt_says_so(app_root, tmp_path, monkeypatch):
    monkeypatch.setenv(BWRAP_ENV, str(tmp_path / "no-bwrap"))
    monkeypatch.setenv("TOOLLOOP_TEST_SECRET", "visible-without-a-sandbox")
    spec = {"e": sandboxed("environment", required=False), "w": sandboxed("write", required=False)}
    plan = admit_plan(files(app_root, app_root, spec, [{"tool": "e", "args": {}},
                                                       {"tool": "w", "args": {"path": str(app_root / "ran")}}]))
    assert [(p.code, p.level) for p in plan.warnings] == [("TL380", "warning"), ("TL380", "warning")]
    assert "its calls run without one" in plan.warnings[0].message
    got, _, _ = run_plan(plan, mock=False)
    reason = f"{BWRAP_ENV} names '{tmp_path / 'no-bwrap'}', which is not a program"
    assert [r["isolation"] for r in got] == [{"kind": "none", "reason": reason}] * 2
    # what the receipt says is what happened: the call ran with nothing confining it
    assert got[0]["result"]["environ"]["TOOLLOOP_TEST_SECRET"] == "visible-without-a-sandbox"
    assert got[1]["result"] == "written" and (app_root / "ran").exists()
    for r in got:
        ReceiptRecord.model_validate(r)


def test_a_required_sandbox_missing_at_run_time_never_runs_the_tool(app_root, monkeypatch):
    """A run that does not pass through admission again (a resume on another machine): the call
    fails instead of running unconfined, and its receipt claims no sandbox."""
    plan = admit_plan(files(app_root, app_root, {"w": sandboxed("write", writable=["out"])},
                            [{"tool": "w", "args": {"path": str(app_root / "out" / "ran")}}]))
    monkeypatch.setenv(BWRAP_ENV, str(app_root / "no-bwrap"))
    got, _, _ = run_plan(plan, mock=False)
    assert got[0]["status"] == "error" and got[0]["error"]["kind"] == "worker_start"
    assert "tool 'w' needs a sandbox, and none can be made on this machine" in got[0]["error"]["message"]
    assert got[0]["isolation"]["kind"] == "none"
    assert not _tool_ran(app_root)


def test_ray_cannot_give_a_sandbox(app_root, cli, tmp_path):
    plan = files(tmp_path, app_root, {"w": sandboxed("write")}, [{"tool": "w", "args": {"path": "x"}}])
    with pytest.raises(ConfigError) as exc:
        admit_plan(plan, placement="ray")
    [p] = exc.value.problems
    assert p.code == "TL423" and "--executor ray cannot give" in p.message and "--executor local" in p.hint
    admit_plan(plan)  # the same plan runs locally
    from toolloop_cli.engine.executors import kind_of

    contract, _ = load_registry(tmp_path / "reg.yml")
    assert kind_of(contract.subagents["s"].tools["w"], "ray") == "sandbox"  # never sent to Ray unconfined
    proc = cli("run", str(plan), "--executor", "ray", "--format", "jsonl")
    assert proc.returncode == 3 and "TL423" in proc.stderr.decode()


def test_a_sandboxed_run_through_the_command_line(cli, tmp_path):
    """The whole command, with the App root under /tmp (bound back into the private /tmp)."""
    root = tmp_path / "app"
    root.mkdir()
    (root / "sbxtools.py").write_text(TOOLS)
    (root / "out").mkdir()
    plan = files(tmp_path, root, {"w": sandboxed("write", writable=["out"])},
                 [{"tool": "w", "args": {"path": str(root / "out" / "in")}},
                  {"tool": "w", "args": {"path": str(root / "not-in")}}])
    proc = cli("run", str(plan), "--format", "jsonl")
    assert proc.returncode == 0, proc.stderr.decode()
    receipts = jsonl(proc.stdout)[:-1]
    assert [r["result"] for r in receipts] == ["written", "refused: Read-only file system"]
    assert (root / "out" / "in").exists() and not (root / "not-in").exists()
    assert receipts[0]["isolation"] == {"kind": "bwrap", "network": "none", "writable": ["out"], "env": []}


def test_a_writable_folder_removed_after_admission_fails_the_call(app_root):
    (app_root / "gone").mkdir()
    plan = admit_plan(files(app_root, app_root, {"w": sandboxed("write", writable=["out", "gone"])},
                            [{"tool": "w", "args": {"path": str(app_root / "out" / "ran")}}]))
    (app_root / "gone").rmdir()
    got, _, _ = run_plan(plan, mock=False)
    assert got[0]["status"] == "error" and got[0]["error"]["kind"] == "worker_died"
    assert "bwrap may not have made the sandbox" in got[0]["error"]["message"]
    assert not _tool_ran(app_root)


def test_an_mcp_tool_cannot_ask_for_a_sandbox(app_root):
    reg = write(app_root / "reg.yml", json.dumps({"version": 1, "app_root": str(app_root), "subagents": {"s": {
        "runner_defaults": {"tool_timeout_s": 5}, "tools": {
            "clock": {"mcp": {"command": ["mcp-server-time"], "allow": ["get_current_time"]}, "effect": "read",
                      "isolation": "sandbox"}}}}}))
    contract, problems = load_registry(reg)
    assert contract is None
    [p] = [p for p in problems if p.level == "error"]
    assert p.code == "TL318" and "tool 'clock' is an MCP tool" in p.message


def test_the_module_is_imported_in_the_sandbox_before_the_deadline_starts(app_root):
    (app_root / "slowsbx.py").write_text("import time\ntime.sleep(1.5)\n\ndef quick():\n    return 'done'\n")
    got = run(app_root, {"q": {**sandboxed("write", timeout_s=1), "callable": "slowsbx:quick"}},
              [{"tool": "q", "args": {}}])
    assert (got[0]["status"], got[0]["result"]) == ("ok", "done")
