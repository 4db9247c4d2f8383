"""Which toolloop the benchmarks' child processes run: by default this checkout built as a wheel and
installed, compiled, into a scratch folder; with ``editable=True`` the checkout itself.

The difference matters for start-up: with ``PYTHONDONTWRITEBYTECODE=1`` (set on some machines) an
editable checkout has no cached bytecode and recompiles the package on every start, which a
user's installed wheel never does (pip compiles it at install time).
"""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class Install:
    def __init__(self, editable: bool = False):
        self.editable = editable

    def __enter__(self) -> "Install":
        self._tmp = tempfile.TemporaryDirectory(prefix="toolloop-bench-")
        self.tmp = Path(self._tmp.name)
        self.env = dict(os.environ)
        if self.editable:
            bytecode = "no cached bytecode" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "bytecode cached"
            self.what = f"editable checkout {ROOT} ({bytecode})"
            return self
        wheels = self.tmp / "wheel"
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if built.returncode != 0:
            sys.exit("building toolloop's wheel failed (use --editable to run the checkout):\n"
                     + built.stdout.decode()[-3000:])
        wheel = next(wheels.glob("*.whl"))
        site = self.tmp / "site"
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(site)
        compileall.compile_dir(str(site), quiet=1)
        self.env["PYTHONPATH"] = str(site) + (os.pathsep + self.env["PYTHONPATH"] if self.env.get("PYTHONPATH") else "")
        self.what = f"installed wheel {wheel.name} (bytecode compiled)"
        found = subprocess.run([sys.executable, "-c", "import toolloop_cli; print(toolloop_cli.__file__)"],
                               env=self.env, cwd=self.tmp, stdout=subprocess.PIPE, check=True).stdout.decode().strip()
        if not found.startswith(str(site)):
            sys.exit(f"the wheel's toolloop_cli is not the one imported ({found})")
        return self

    def __exit__(self, *exc: object) -> None:
        self._tmp.cleanup()

    def toolloop(self, *args: str) -> list[str]:
        """The command line of ``toolloop ARGS``; run it with ``env=self.env`` and a cwd outside the checkout."""
        return [sys.executable, "-m", "toolloop_cli", *args]
