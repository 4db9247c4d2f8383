#!/usr/bin/env python3
"""A generated registry of N tools for the ``validate`` figure (bench/run_all.py --only validate).

Each tool is a sync callable in a generated App module (its bytecode compiled once, as an installed
App's is), with input and output schemas; the file is what ``toolloop validate`` reads and what the
baseline loads with the YAML C loader alone.

Usage: python bench/bench_validate.py FOLDER [--tools 500]   # writes FOLDER/registry.yml, FOLDER/bigapp.py
"""

from __future__ import annotations

import argparse
import py_compile
from pathlib import Path


def write_big_registry(path: Path, folder: Path, n: int) -> None:
    """A registry of ``n`` sync tools, each with input and output schemas, an App module holding them."""
    lines = ["import typing", ""]
    for i in range(n):
        lines.append(f"def tool_{i}(text: str, count: int = 1) -> dict:\n    return {{'text': text * count}}\n")
    (folder / "bigapp.py").write_text("\n".join(lines))
    # its bytecode cached, as an installed App's is: with PYTHONDONTWRITEBYTECODE=1 (set on some
    # machines) Python would otherwise compile the 500 functions again in every measured run
    py_compile.compile(str(folder / "bigapp.py"), doraise=True)
    out = [f"version: 1\napp_root: {folder}\nsubagents:\n  main:\n    runner_defaults: {{tool_timeout_s: 30}}\n"
           "    tools:\n"]
    for i in range(n):
        out.append(
            f"      tool_{i}:\n"
            f"        callable: bigapp:tool_{i}\n"
            f"        description: Repeat a text (tool {i}).\n"
            "        input_schema:\n"
            "          type: object\n"
            "          additionalProperties: false\n"
            "          required: [text]\n"
            "          properties:\n"
            "            text: {type: string, maxLength: 1000}\n"
            "            count: {type: integer, minimum: 1, maximum: 10}\n"
            "        output_schema:\n"
            "          type: object\n"
            "          required: [text]\n"
            "          properties:\n"
            "            text: {type: string}\n"
        )
    path.write_text("".join(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--tools", type=int, default=500)
    a = ap.parse_args()
    a.folder.mkdir(parents=True, exist_ok=True)
    write_big_registry(a.folder / "registry.yml", a.folder, a.tools)
    print(a.folder / "registry.yml")


if __name__ == "__main__":
    main()
