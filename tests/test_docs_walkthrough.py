"""What a newcomer meets first: the README and the pages it links. Each test here follows the docs
as written (their links, their shell blocks) and fails where a newcomer would trip."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _sh_block_after(page: Path, heading: str) -> str:
    """The first ```sh block below ``heading`` in ``page``."""
    text = page.read_text(encoding="utf-8")
    start = text.index(heading)
    found = re.search(r"```sh\n(.*?)```", text[start:], re.S)
    assert found is not None, f"no sh block below {heading!r} in {page.name}"
    return found.group(1)


def test_every_docs_page_is_linked_from_the_readme():
    readme = README.read_text(encoding="utf-8")
    missing = [p.name for p in DOCS if f"](docs/{p.name})" not in readme]
    assert missing == []


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_docs_stand_on_their_own(page):
    # the docs describe behaviour themselves; the interface contract is a design-time document
    text = page.read_text(encoding="utf-8")
    assert "SPEC.md" not in text
    assert "interface contract" not in text.lower()


@pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed; the man lines cannot run")
def test_completion_and_man_install_lines_work_in_a_fresh_home(tmp_path):
    block = _sh_block_after(ROOT / "docs" / "ci.md", "## Shell completion and the man page")
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "80"}
    done = subprocess.run(["bash", "-e", "-c", block], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "TOOLLOOP(1)" in done.stdout  # man -l read the page from the checkout
    installed = [
        home / ".local/share/bash-completion/completions/toolloop",
        home / ".zfunc/_toolloop",
        home / ".config/fish/completions/toolloop.fish",
        home / ".local/share/man/man1/toolloop.1",
    ]
    assert [p for p in installed if not p.is_file()] == []
    # the installed bash script completes a command, as a new shell would load it
    probe = ("source ~/.local/share/bash-completion/completions/toolloop;"
             " COMP_WORDS=(toolloop valid); COMP_CWORD=1; _toolloop; echo \"${COMPREPLY[@]}\"")
    done = subprocess.run(["bash", "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.stdout.split() == ["validate"], done.stderr


def _command_lines(page: Path) -> list[str]:
    """The toolloop command lines of a page's ```sh blocks (a leading ``$ `` dropped)."""
    text = page.read_text(encoding="utf-8")
    lines = []
    for block in re.findall(r"```(?:sh|bash)\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.removeprefix("$ ").strip()
            if line.startswith("toolloop "):
                lines.append(line)
    return lines


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_example_files_the_commands_name_are_in_the_checkout(page):
    # a command a newcomer copies runs on the checkout's own example files (placeholders are
    # written in capitals: RUN_ID, PLAN)
    missing = [(line, found) for line in _command_lines(page)
               for found in re.findall(r"(?<![\w/.])((?:plans|registries)/[\w./-]+\.(?:ya?ml|jsonl))", line)
               if not (ROOT / found).exists()]
    assert missing == []


def _exit_rows(page: Path) -> dict[str, str]:
    text = page.read_text(encoding="utf-8").split("## Exit codes", 1)[1]
    return dict(re.findall(r"^\| (\d+) \| (.*) \|$", text, re.M))


def test_the_guides_exit_codes_cover_every_case_a_run_can_end_in():
    rows = _exit_rows(ROOT / "docs" / "guide.md")
    assert sorted(rows, key=int) == ["0", "1", "2", "3", "4", "70", "130", "141"]
    for code, case in (("1", "--stream"), ("1", "unwritable"), ("1", "routed"), ("2", "damaged state database"),
                       ("2", "extra"), ("4", "budget pause"), ("4", "abort")):
        assert case in rows[code], (code, case)
    assert "`toolloop replay RUN_ID` without `--from`" in (ROOT / "docs" / "guide.md").read_text(encoding="utf-8")


def test_the_files_the_quick_tour_leaves_behind_are_kept_out_of_git():
    # plans/agents.yml's write tool keeps its ledger in the folder it runs in (the checkout's)
    for path in ("ledger.jsonl", ".toolloop/state.db"):
        done = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, (path, done.stderr)


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_run_ids_in_examples_look_like_toolloops(page):
    # toolloop's run ids are UTC times with a random suffix (20260102T030405Z-1a2b3c4d); an id of
    # another shape in an example sends a newcomer looking for a run that cannot exist
    assert re.findall(r"\b01J[0-9A-Z.]*", page.read_text(encoding="utf-8")) == []
