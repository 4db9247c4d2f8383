"""What users see, pinned: receipts of the example plan and validate's text, as snapshots
(times and ids matched by type)."""

from __future__ import annotations

import subprocess
import sys

from syrupy.matchers import path_type

from conftest import ROOT, jsonl, write

VOLATILE = path_type(
    {r"\d+\.(run_id|receipt_id|started_at|finished_at|chain_sha256)": (str,), r"\d+\.duration_ms": (float, int)},
    regex=True,
)


def test_sequential_example_receipts(cli, snapshot):
    proc = cli("run", str(ROOT / "plans" / "sequential.yml"))
    assert proc.returncode == 0, proc.stderr.decode()
    assert jsonl(proc.stdout) == snapshot(matcher=VOLATILE)


def test_validate_text_for_a_registry_with_several_mistakes(tmp_path, snapshot):
    write(tmp_path / "app" / "tools.py", "def run(text):\n    return {}\n")
    write(tmp_path / "reg.yml", """
        version: 1
        app_root: app
        subagents:
          w:
            runner_defaults: {tool_timeout_s: 5, allowed_tools: [run, walk]}
            tools:
              run:
                callable: tools:run
                description: Run.
                timeout_sec: 3
                input_schema: {type: objekt, properties: {api_token: {type: string}}}
                output_schema: {}
              gone:
                callable: tools:_private
                description: Private.
                input_schema: {}
                output_schema: {$ref: "http://example.com/s.json"}
    """)
    proc = subprocess.run([sys.executable, "-m", "toolloop_cli", "validate", "reg.yml"], cwd=tmp_path,
                          capture_output=True, env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1
    assert proc.stdout.decode() == snapshot
