"""Generated artifacts (completions, man page, JSON Schemas, finding table, pre-commit hook) stay in
step with the command line and the package's tables, and work in the tools that read them."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
import yaml

from toolloop_cli.cli.app import app
from toolloop_cli.contract.problems import CODES

ROOT = Path(__file__).resolve().parent.parent
BASH = ROOT / "completions" / "toolloop.bash"
ZSH = ROOT / "completions" / "toolloop.zsh"
FISH = ROOT / "completions" / "toolloop.fish"
MAN = ROOT / "man" / "toolloop.1"


def _load_script():
    spec = importlib.util.spec_from_file_location("gen_artifacts", ROOT / "scripts" / "gen_artifacts.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


gen = _load_script()
GENERATED = gen.generate()


def _walk(command, path=()):
    """(path, command) for every visible command of the click tree, read independently of the script."""
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if not getattr(sub, "hidden", False):
            yield from _walk(sub, (*path, name))


TREE = list(_walk(typer.main.get_command(app)))


def _long_options(command) -> set[str]:
    ctx = command.make_context("x", [], resilient_parsing=True)
    return {
        n for p in command.get_params(ctx)
        if p.param_type_name == "option" and not getattr(p, "hidden", False)
        for n in (*p.opts, *p.secondary_opts) if n.startswith("--")
    }


# --- drift ---------------------------------------------------------------------------------


def test_generates_every_expected_file():
    assert sorted(GENERATED) == [
        "completions/toolloop.bash",
        "completions/toolloop.fish",
        "completions/toolloop.zsh",
        "docs/findings.md",
        "docs/schemas/plan.schema.json",
        "docs/schemas/receipt.schema.json",
        "docs/schemas/registry.schema.json",
        "docs/schemas/suite.schema.json",
        "man/toolloop.1",
    ]


@pytest.mark.parametrize("rel", sorted(GENERATED))
def test_committed_file_matches_generator(rel):
    path = ROOT / rel
    assert path.is_file(), f"{rel} is missing; run python scripts/gen_artifacts.py"
    assert path.read_text(encoding="utf-8") == GENERATED[rel], f"{rel} is stale; run python scripts/gen_artifacts.py"


def test_generation_is_deterministic_and_holds_no_local_paths():
    again = gen.generate()
    assert again == GENERATED
    for rel, content in GENERATED.items():
        assert str(ROOT) not in content, rel
        assert "/home/" not in content and "/tmp/" not in content, rel
        assert content.endswith("\n") and not content.endswith("\n\n"), rel


def test_check_mode_names_stale_files_and_passes_on_fresh_ones(tmp_path):
    script = ROOT / "scripts" / "gen_artifacts.py"
    fresh = subprocess.run([sys.executable, str(script), "--root", str(tmp_path)], capture_output=True, text=True)
    assert fresh.returncode == 0, fresh.stderr
    ok = subprocess.run([sys.executable, str(script), "--check", "--root", str(tmp_path)], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stderr == ""
    (tmp_path / "man" / "toolloop.1").write_text("stale\n", encoding="utf-8")
    (tmp_path / "docs" / "schemas" / "plan.schema.json").unlink()
    stale = subprocess.run([sys.executable, str(script), "--check", "--root", str(tmp_path)], capture_output=True, text=True)
    assert stale.returncode == 1
    named = sorted(line.split(":")[0] for line in stale.stderr.splitlines())
    assert named == ["docs/schemas/plan.schema.json", "man/toolloop.1"]
    assert (tmp_path / "man" / "toolloop.1").read_text(encoding="utf-8") == "stale\n"  # --check writes nothing


# --- coverage of the command tree ----------------------------------------------------------


def _man_source() -> str:
    return MAN.read_text(encoding="utf-8").replace("\\-", "-")


@pytest.mark.parametrize("path,command", TREE, ids=[" ".join(("toolloop", *p)) for p, _ in TREE])
def test_bash_and_man_cover_the_command(path, command):
    bash = BASH.read_text(encoding="utf-8")
    man = _man_source()
    for name in path:
        assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", bash), f"{name} not in bash completion"
    if path:
        assert f"\n.SS {' '.join(path)}\n" in man, f"no man subsection for {path}"
    options = _long_options(command)
    assert "--help" in options
    for opt in options:
        assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", bash), f"{opt} not in bash completion"
        assert opt in man, f"{opt} of {path} not in man page"


def _bash_complete(*words: str, cwd: Path = ROOT, env: dict | None = None) -> list[str]:
    """COMPREPLY of the generated bash completion for the command line ``words`` (last = cursor word)."""
    script = (
        f"source {BASH}\n"
        "COMP_WORDS=(\"$@\"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=()\n"
        "_toolloop\n"
        "printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    done = subprocess.run(["bash", "-c", script, "bash", *words], capture_output=True, text=True, cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    return [w for w in done.stdout.splitlines() if w]


@pytest.mark.parametrize("path,command", TREE, ids=[" ".join(("toolloop", *p)) for p, _ in TREE])
def test_bash_completes_subcommands_and_options(path, command):
    subs = sorted(n for n, c in getattr(command, "commands", {}).items() if not getattr(c, "hidden", False))
    if subs:
        assert sorted(_bash_complete("toolloop", *path, "")) == subs
    assert set(_bash_complete("toolloop", *path, "--")) == _long_options(command)


def test_bash_completes_enum_values():
    assert _bash_complete("toolloop", "validate", "--format", "") == ["text", "json", "github", "sarif"]
    assert _bash_complete("toolloop", "run", "-f", "j") == ["jsonl", "json"]
    assert _bash_complete("toolloop", "runs", "list", "--format", "=", "t") == ["table"]
    assert _bash_complete("toolloop", "schema", "r") == ["registry", "receipt"]
    # an option's value is not taken for a subcommand or a positional argument
    assert _bash_complete("toolloop", "tools", "--subagent", "schema", "--f") == ["--format"]


def test_bash_completion_parses():
    done = subprocess.run(["bash", "-n", str(BASH)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _shell(name: str) -> str:
    # a missing shell fails the test: .ci/run installs zsh and fish (Debian packages)
    found = shutil.which(name)
    assert found is not None, f"{name} is missing: apt-get install -y {name}"
    return found


def test_zsh_completion_parses():
    _shell("zsh")
    done = subprocess.run(["zsh", "-n", str(ZSH)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_zsh_and_fish_cover_every_option():
    zsh = ZSH.read_text(encoding="utf-8")
    fish = FISH.read_text(encoding="utf-8")
    for path, command in TREE:
        for name in path:
            assert name in zsh and name in fish
        for opt in _long_options(command):
            assert opt in zsh, opt
            assert f"-l {opt[2:]}" in fish, opt


def test_fish_completion_offers_commands_options_and_values():
    _shell("fish")

    def complete(line: str) -> list[str]:
        done = subprocess.run(
            ["fish", "--no-config", "-c", f"source {FISH}; complete -C {json.dumps(line)}"],
            capture_output=True, text=True, cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr
        return sorted(row.split("\t")[0] for row in done.stdout.splitlines())

    top = sorted(n for n, c in TREE[0][1].commands.items() if not getattr(c, "hidden", False))
    assert complete("toolloop ") == top
    assert complete("toolloop validate --format ") == ["github", "json", "sarif", "text"]
    runs = dict(TREE)[("runs",)]
    assert complete("toolloop runs ") == sorted(n for n, c in runs.commands.items() if not getattr(c, "hidden", False))
    assert "list" in complete("toolloop runs ")
    validate = dict(TREE)[("validate",)]
    assert set(complete("toolloop validate --")) == _long_options(validate)


# --- man page ------------------------------------------------------------------------------


def test_man_page_sections_and_exit_codes():
    man = _man_source()
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "EXIT STATUS", "ENVIRONMENT", "FILES"):
        assert f"\n.SH {section}\n" in man, section
    exit_part = man.split(".SH EXIT STATUS\n")[1].split("\n.SH ")[0]
    assert re.findall(r"^\.B (\d+)$", exit_part, flags=re.M) == ["0", "1", "2", "3", "4", "130", "141", "70"]
    env_part = man.split(".SH ENVIRONMENT\n")[1].split("\n.SH ")[0]
    assert ".B TOOLLOOP_STATE_DIR" in env_part and ".B NO_COLOR" in env_part


def _render_man() -> subprocess.CompletedProcess | None:
    env = {**os.environ, "MANWIDTH": "100", "MANPAGER": "cat", "PAGER": "cat", "LC_ALL": "C.UTF-8"}
    if shutil.which("groff"):
        return subprocess.run(["groff", "-man", "-Tutf8", "-ww", str(MAN)], capture_output=True, text=True, env=env)
    if shutil.which("man"):
        return subprocess.run(["man", "--warnings", "-l", str(MAN)], capture_output=True, text=True, env=env)
    return None


@pytest.mark.skipif(shutil.which("groff") is None and shutil.which("man") is None,
                    reason="neither groff nor man is installed; man page rendering not checked")
def test_man_page_renders_without_warnings():
    done = _render_man()
    assert done is not None
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    text = re.sub(r".\x08", "", done.stdout)
    assert "toolloop validate" in text
    assert "EXIT STATUS" in text


# --- schemas and findings -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["registry", "plan", "receipt"])
def test_schema_file_is_a_valid_schema_and_equals_cli_output(name):
    from jsonschema import Draft202012Validator

    path = ROOT / "docs" / "schemas" / f"{name}.schema.json"
    schema = json.loads(path.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    done = subprocess.run([sys.executable, "-m", "toolloop_cli", "schema", name], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == path.read_text(encoding="utf-8")


def test_findings_table_lists_every_code_once_with_a_fix():
    rows = {}
    for line in (ROOT / "docs" / "findings.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\| `(TL\d+)` \| (.+?) \| (.+) \|$", line)
        if m:
            assert m.group(1) not in rows, f"{m.group(1)} listed twice"
            rows[m.group(1)] = (m.group(2), m.group(3))
    assert sorted(rows) == sorted(CODES)
    for code, (meaning, fix) in rows.items():
        assert meaning == CODES[code].replace("|", "\\|")
        assert len(fix) > 10, code


def test_fix_hints_cover_exactly_the_codes():
    from toolloop_cli.contract.problems import FIXES

    assert set(FIXES) == set(CODES)


# --- pre-commit hook -----------------------------------------------------------------------


def test_pre_commit_hook_definition():
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    (hook,) = [h for h in hooks if h["id"] == "toolloop-validate"]
    assert hook["language"] == "python"
    assert hook["entry"] == "toolloop validate"
    assert hook["pass_filenames"] is False
    files = re.compile(hook["files"])
    # the App's Python code too: a renamed callable breaks the registry
    for matching in ("registries/app.yml", "registry.yaml", "toolloop.lock", "plans/nightly.yml", "src/app/tools.py",
                     "app/__init__.py", "pyproject.toml", "sub/pyproject.toml"):
        assert files.search(matching), matching
    for other in ("README.md", "docs/index.rst", "app/tools.pyc", "toolloop.lock.bak"):
        assert not files.search(other), other
    # the example in the comment pins a commit, never a tag that does not exist
    text = (ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    assert re.search(r"rev: [0-9a-f]{40}", text) and "v0.1.0" not in text


# --- run ids from the journal ----------------------------------------------------------------


@pytest.fixture(scope="module")
def journal(tmp_path_factory):
    """A folder whose journal holds two runs, and the environment a shell completes in there
    (``toolloop`` on PATH); the run ids newest first."""
    folder = tmp_path_factory.mktemp("journal")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("TOOLLOOP_STATE_DIR", None)
    ids = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "toolloop_cli", "run", str(ROOT / "plans" / "sequential.yml"),
                               "--format", "jsonl"], cwd=folder, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        ids.append(json.loads(done.stdout.splitlines()[-1])["run_id"])
    return folder, env, ids[::-1]


def test_run_ids_are_read_from_the_journal_and_nothing_is_created(journal, tmp_path):
    folder, env, ids = journal
    run = [sys.executable, "-m", "toolloop_cli", "__complete-run-ids"]
    done = subprocess.run(run, cwd=folder, capture_output=True, text=True, env=env)
    assert (done.returncode, done.stdout.split()) == (0, ids)
    done = subprocess.run([*run, ids[1][:-3]], cwd=folder, capture_output=True, text=True, env=env)
    assert done.stdout.split() == [ids[1]]
    # no journal: nothing offered, nothing created
    done = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("words", [("resume",), ("runs", "show"), ("approve",), ("approvals", "list")])
def test_bash_completes_run_ids(journal, words):
    folder, env, ids = journal
    assert _bash_complete("toolloop", *words, "", cwd=folder, env=env) == ids
    assert _bash_complete("toolloop", *words, ids[1][:-2], cwd=folder, env=env) == [ids[1]]
    # from elsewhere, in the --state-dir given on the line
    state = str(folder / ".toolloop")
    assert _bash_complete("toolloop", *words, "--state-dir", state, "", env=env) == ids
    assert _bash_complete("toolloop", *words, f"--state-dir={state}", "", env=env) == ids
    assert _bash_complete("toolloop", *words, "", env=env) != ids  # the repository's own journal, if any


def test_zsh_completes_run_ids(journal):
    folder, env, ids = journal
    _shell("zsh")
    # compinit is not needed to call the helper: compadd and compdef are stood in for
    script = (f"compdef() {{ : }}; compadd() {{ print -l -- ${{(P)2}} }}; source {ZSH}; typeset -A opt_args;"
              " _toolloop_run_ids; opt_args=(--state-dir \"$1\"); cd /; _toolloop_run_ids")
    done = subprocess.run(["zsh", "-f", "-c", script, "zsh", str(folder / ".toolloop")], cwd=folder,
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ids + ids
    text = ZSH.read_text(encoding="utf-8")
    for fn in ("_toolloop_resume", "_toolloop_runs_show", "_toolloop_approve", "_toolloop_replay"):
        body = text.split(f"\n{fn}() {{\n", 1)[1].split("\n}\n", 1)[0]
        assert "run_id:_toolloop_run_ids'" in body, fn


def test_fish_completes_run_ids(journal):
    folder, env, ids = journal
    _shell("fish")

    def complete(line: str, cwd: Path) -> list[str]:
        done = subprocess.run(["fish", "--no-config", "-c", f"source {FISH}; complete -C {json.dumps(line)}"],
                              capture_output=True, text=True, cwd=cwd, env=env)
        assert done.returncode == 0, done.stderr
        return [row.split("\t")[0] for row in done.stdout.splitlines()]

    # fish sorts what it offers in its own order (digit runs as numbers: two ids of the same second
    # may come either way), so what is offered is compared, not its order
    assert sorted(complete("toolloop resume ", folder)) == sorted(ids)
    assert sorted(complete(f"toolloop runs show --state-dir {folder / '.toolloop'} ", ROOT)) == sorted(ids)


def test_every_option_and_argument_that_takes_a_value_names_it():
    missing = []
    for path, command in TREE:
        ctx = command.make_context("x", [], resilient_parsing=True)
        for p in command.get_params(ctx):
            if getattr(p, "hidden", False) or getattr(p, "is_flag", False) or p.name == "help":
                continue
            if not p.metavar:
                missing.append(f"{' '.join(('toolloop', *path))} {p.opts[0]}")
    assert missing == []
    run = typer.main.get_command(app).commands["run"]
    shown = run.get_help(run.make_context("run", [], resilient_parsing=True))
    for part in ("--registry FILE", "-j, --max-concurrency N", "--lanes FILE|-", "--halt POLICY", "--label KEY=VALUE",
                 "--timeout SECONDS", "-f, --format auto|table|jsonl|json"):
        assert part in shown, part
