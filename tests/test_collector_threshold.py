"""The command line's process runs the cycle collector's youngest generation every 10,000 new
containers instead of Python's 700 (a batch's survivors were examined over and over); a library
caller's process keeps its own settings."""

from __future__ import annotations

import gc
import subprocess
import sys

from toolloop_cli.cli import app


def test_the_command_line_collects_the_youngest_generation_less_often():
    probe = ("import gc, sys; from toolloop_cli.cli import app; sys.argv = ['toolloop', '--version']\n"
             "try:\n    app.main()\nexcept SystemExit:\n    pass\nprint(gc.get_threshold())")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == f"({app.GC_YOUNG_THRESHOLD}, 10, 10)"
    assert app.GC_YOUNG_THRESHOLD == 10_000


def test_importing_the_package_leaves_a_library_callers_settings_alone():
    probe = "import gc; gc.set_threshold(123, 4, 5); import toolloop_cli.cli.app, toolloop_cli.engine.run; print(gc.get_threshold())"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(123, 4, 5)"
    assert gc.get_threshold()[0] != 0  # this process's collector is on
