"""Every finding code, produced from a small file and checked for its place and its words.

Each test writes a registry or plan into a temporary folder (the current folder during the
test, so findings name files relative to it), loads it through the public entry points
(``load_registry``, ``admit_plan``, the ``validate`` command) and asserts the exact code, level,
file, line and column, and the parts of the message and hint a user acts on.

``test_every_code_is_tested`` fails when a code in ``CODES`` has no test here: a test declares
the codes it proves with ``@covers(...)``, and ``found()`` fails unless the code was reported.
"""

from __future__ import annotations

import io
import socket
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from conftest import APP, ROOT
from toolloop_cli.contract.problems import CODES, Problem
from toolloop_cli.contract.registry import load_registry
from toolloop_cli.errors import ConfigError
from toolloop_cli.plan.admit import admit_plan

COVERED: set[str] = set()


def covers(*codes: str):
    """Declare the finding codes a test proves (checked by ``test_every_code_is_tested``)."""
    unknown = [c for c in codes if c not in CODES]
    assert not unknown, f"not finding codes: {unknown}"
    COVERED.update(codes)
    return lambda fn: fn


# ---------------------------------------------------------------------------------------------
# helpers


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Run in tmp_path; undo the sys.path entries and App modules a test's registry brought in."""
    monkeypatch.chdir(tmp_path)
    path_before = list(sys.path)
    modules_before = set(sys.modules)
    yield
    sys.path[:] = path_before
    for name in set(sys.modules) - modules_before:
        if name.startswith("pkg_"):
            del sys.modules[name]


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def write(name: str, text: str) -> Path:
    path = Path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dedent(text), encoding="utf-8")
    return path


def pos(text: str, needle: str, nth: int = 1) -> tuple[int, int]:
    """1-based (line, column) of the nth occurrence of ``needle`` in the dedented text."""
    lines = dedent(text).splitlines()
    seen = 0
    for i, line in enumerate(lines, start=1):
        start = 0
        while (j := line.find(needle, start)) >= 0:
            seen += 1
            if seen == nth:
                return i, j + 1
            start = j + 1
    raise AssertionError(f"{needle!r} not in text")


def app_package(tmp_path: Path, modules: dict[str, str]) -> str:
    """Write a uniquely named package into tmp_path; returns its name (app_root is tmp_path)."""
    name = f"pkg_{uuid.uuid4().hex[:8]}"
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for mod, body in modules.items():
        (pkg / f"{mod}.py").write_text(dedent(body))
    return name


def registry(text: str, name: str = "reg.yml", **kw) -> tuple[object, list[Problem]]:
    path = write(name, text)
    return load_registry(path, **kw)


def found(problems: list[Problem], code: str, *, level: str = "error", file: str = "reg.yml",
          at: tuple[int, int] | None = None, message: tuple[str, ...] = (), hint: tuple[str, ...] = ()) -> Problem:
    """The one finding with ``code``; asserts its level, file, place and words."""
    matching = [p for p in problems if p.code == code]
    assert len(matching) == 1, f"expected one {code}, got {[(p.code, p.line, p.message) for p in problems]}"
    p = matching[0]
    assert p.level == level, p
    assert p.file == file, p
    if at is not None:
        assert (p.line, p.col) == at, p
    for part in message:
        assert part in p.message, (part, p.message)
    for part in hint:
        assert part in p.hint, (part, p.hint)
    return p


def codes(problems: list[Problem]) -> list[str]:
    return [p.code for p in problems]


def rejected(plan_path: Path, **kw) -> list[Problem]:
    with pytest.raises(ConfigError) as exc:
        admit_plan(plan_path, **kw)
    return exc.value.problems


# A registry whose single tool is fine; tests vary one thing at a time.
TOOL = """
version: 1
app_root: {app}
subagents:
  w:
    runner_defaults:
      tool_timeout_s: 5
    tools:
      echo:
        callable: testapp.tools:echo
        description: Returns its arguments.
        input_schema: {input}
        output_schema: {output}
{extra}"""


def tool_registry(input: str = "{}", output: str = "{}", extra: str = "", app: str = str(APP)) -> str:
    extra = textwrap.indent(dedent(extra), " " * 8) if extra else ""
    return TOOL.format(app=app, input=input, output=output, extra=extra)


def test_the_base_registry_is_clean():
    contract, problems = registry(tool_registry())
    assert problems == [] and contract is not None


# ---------------------------------------------------------------------------------------------
# TL1xx: loading


@covers("TL101")
def test_missing_and_unreadable_files():
    _, problems = load_registry("nowhere.yml")
    found(problems, "TL101", file="nowhere.yml", at=(1, 1), message=("file not found", "nowhere.yml"),
          hint=("check the path",))
    Path("latin1.yml").write_bytes("version: 1\ndescription: caf\xe9\n".encode("latin-1"))
    _, problems = load_registry("latin1.yml")
    found(problems, "TL101", file="latin1.yml", message=("not UTF-8",), hint=("UTF-8",))
    Path("folder.yml").mkdir()
    _, problems = load_registry("folder.yml")
    found(problems, "TL101", file="folder.yml", message=("folder",))


@covers("TL102")
def test_yaml_syntax_error_points_at_the_problem():
    text = """
    version: 1
    subagents: {w: {tools: {}}
    """
    _, problems = registry(text)
    p = found(problems, "TL102", at=(3, 1), message=("YAML syntax error", "flow mapping", "line 2, column 12"),
              hint=("indent with spaces",))
    assert problems == [p]


def test_nesting_deeper_than_the_bound_is_refused_not_a_crash():
    # libyaml accepts up to 1000 levels; far fewer already exhaust Python's stack in later checks
    from toolloop_cli.contract.source import MAX_DEPTH

    for depth in (MAX_DEPTH, 990):
        text = "version: 1\nx: " + "[" * depth + "]" * depth + "\nsubagents: {}\n"
        Path("deep.yml").write_text(text)
        _, problems = load_registry("deep.yml")
        found(problems, "TL102", file="deep.yml", at=(2, 4 + MAX_DEPTH - 1), message=(f"deeper than {MAX_DEPTH} levels",),
              hint=("flatten",))
    text = "version: 1\nx: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\nsubagents: {}\n"
    Path("deep.yml").write_text(text)
    _, problems = load_registry("deep.yml")
    assert codes(problems) == ["TL201"]  # only the unknown key 'x'


@covers("TL103")
def test_duplicate_key_is_reported_at_its_second_occurrence():
    text = tool_registry(extra="description: Said twice.\n")
    _, problems = registry(text)
    first_line = pos(text, "description:")[0]
    found(problems, "TL103", at=pos(text, "description:", nth=2),
          message=("duplicate key 'description'", f"first defined at line {first_line}"),
          hint=("remove one",))


@covers("TL104")
def test_alias_bomb_is_refused_quickly():
    lines = ["version: 1", "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 10):  # ten to the tenth strings once expanded
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append("subagents: {}")
    Path("bomb.yml").write_text("\n".join(lines) + "\n")
    started = time.perf_counter()
    _, problems = load_registry("bomb.yml")
    assert time.perf_counter() - started < 0.5
    # refused at the first node that grows past the bound, before anything is built
    p = found(problems, "TL104", file="bomb.yml", at=(7, 5), message=("alias bomb",), hint=("aliases",))
    assert problems == [p]


def test_recursive_alias_is_refused_not_looped_on():
    text = """
    version: 1
    loop: &a [x, *a]
    subagents: {}
    """
    started = time.perf_counter()
    _, problems = registry(text)
    assert time.perf_counter() - started < 0.5
    found(problems, "TL104", at=pos(text, "&a"), message=("refers to the anchor that contains it",))


def test_aliases_within_the_bound_are_expanded():
    text = """
    version: 1
    schemas:
      - &open {type: object}
    subagents:
      w:
        runner_defaults: {tool_timeout_s: 5}
        tools:
          echo:
            callable: testapp.tools:echo
            description: Returns its arguments.
            input_schema: *open
            output_schema: *open
    """
    _, problems = registry(text, app_root=str(APP))
    assert codes(problems) == ["TL201"]  # only the unknown 'schemas' key; the aliases are fine


@covers("TL105")
def test_language_tags_are_refused():
    text = """
    version: 1
    subagents:
      w:
        runner_defaults: {tool_timeout_s: 5}
        tools:
          echo: !!python/object:os.system
            callable: testapp.tools:echo
    """
    _, problems = registry(text)
    p = found(problems, "TL105", at=pos(text, "!!python"),
              message=("tag 'tag:yaml.org,2002:python/object:os.system' is not allowed", "safe YAML"),
              hint=("remove the tag",))
    assert p.path == "subagents.w.tools.echo"
    # a tagged value is one finding, not also a type error for what the tag left behind
    text = "version: 1\nsubagents: !!python/object/apply:os.system [echo pwned]\n"
    _, problems = registry(text, "apply.yml")
    found(problems, "TL105", file="apply.yml", at=(2, 12), message=("python/object/apply:os.system",))
    assert codes(problems) == ["TL105"]
    text = tool_registry(extra="timeout_s: .nan\n")
    _, problems = registry(text, "nan.yml")
    found(problems, "TL105", file="nan.yml", at=pos(text, ".nan"), message=("'.nan' is not a JSON number",),
          hint=("finite number",))


@pytest.mark.parametrize("value, words", [
    ("!!int false", "'false' is not a whole number"),
    ("!!float x", "'x' is not a number"),
    ("!!bool maybe", "'maybe' is not true or false"),
    ("!!null something", "'something' is not null"),
    ("!!float ''", "'' is not a number"),
    ("1" * 5000, "more than 4,000 digits"),
])
def test_a_tag_on_a_value_it_cannot_hold_is_a_finding(value, words):
    text = tool_registry(extra=f"timeout_s: {value}\n")
    _, problems = registry(text, "tagged.yml")
    p = found(problems, "TL105", file="tagged.yml", at=pos(text, value[:8]), message=(words,),
              hint=("remove the tag",))
    assert problems == [p] and len(p.message) < 200  # not also a type error, and the digits are not all quoted


@pytest.mark.parametrize("value, shown", [("{a: 1}", "{'a': 1}"), ("[x]", "['x']"), ("3", "3"), ("true", "True")])
def test_a_schema_keyword_that_is_not_text_is_a_finding(value, shown):
    text = tool_registry(input=f"{{$schema: {value}, type: object}}")
    _, problems = registry(text, "schema.yml")
    found(problems, "TL320", file="schema.yml", at=pos(text, value),
          message=("input_schema is not a valid JSON Schema", f"{shown} is not of type 'string'"))


def test_a_list_of_lists_as_type_with_a_redact_pointer_is_a_finding():
    text = tool_registry(input="{type: [[object]]}", extra="redact: [/password]\n")
    _, problems = registry(text, "types.yml")
    assert {p.code for p in problems} <= {"TL320", "TL341"}
    found(problems, "TL320", file="types.yml", at=pos(text, "[[object]]"), message=("[['object']] is not one of",))


@pytest.mark.parametrize("mode", ["{parallel: 1}", "[parallel]", "7"])
def test_a_mode_that_is_not_text_is_a_finding(mode):
    write("reg.yml", tool_registry())
    text = f"version: 1\nregistry: reg.yml\nsubagent: w\nmode: {mode}\ncalls: []\n"
    path = write("plan.yml", text)
    found(rejected(path), "TL203", file="plan.yml", at=(4, 7), message=("'mode' must be one of",))


@covers("TL106")
def test_empty_or_non_mapping_documents():
    _, problems = registry("# nothing but a comment\n")
    found(problems, "TL106", at=(1, 1), message=("empty",), hint=("mapping",))
    _, problems = registry("- version: 1\n", "list.yml")
    found(problems, "TL106", file="list.yml", at=(1, 1), message=("mapping at the top level", "found a list"),
          hint=("version: 1",))


# ---------------------------------------------------------------------------------------------
# TL2xx: structure


@covers("TL201")
def test_misspelled_key_gets_did_you_mean():
    text = tool_registry(extra="timeout_sec: 3\n")
    _, problems = registry(text)
    p = found(problems, "TL201", at=pos(text, "timeout_sec"), message=("unknown key 'timeout_sec'",),
              hint=("did you mean 'timeout_s'?",))
    assert p.path == "subagents.w.tools.echo.timeout_sec"
    assert p.hint == "did you mean 'timeout_s'?"


def test_unknown_key_without_a_close_name_lists_the_allowed_keys():
    text = "version: 1\nsubagents: {}\nflavour: mild\n"
    _, problems = registry(text)
    found(problems, "TL201", at=(3, 1), hint=("allowed keys: app_root, evidence, subagents, version",))


@covers("TL202")
def test_required_keys_missing():
    text = """
    version: 1
    subagents:
      w:
        runner_defaults: {tool_timeout_s: 5}
        tools:
          echo:
            callable: testapp.tools:echo
            description: Returns its arguments.
            input_schema: {}
    """
    _, problems = registry(text, app_root=str(APP))
    found(problems, "TL202", at=pos(text, "echo:"), message=("'output_schema' is missing", "echo"),
          hint=("add 'output_schema:'", "{} means open"))
    _, problems = registry("version: 1\n", "empty.yml")
    found(problems, "TL202", file="empty.yml", at=(1, 1), message=("required key 'subagents' is missing",),
          hint=("add 'subagents:'",))


@covers("TL203")
def test_wrong_types_and_ranges():
    text = tool_registry(extra="effect: reed\ntimeout_s: -1\ncacheable: maybe\n")
    _, problems = registry(text)
    by_path = {p.path: p for p in problems}
    assert set(codes(problems)) == {"TL203"}
    effect = by_path["subagents.w.tools.echo.effect"]
    assert (effect.line, effect.col) == pos(text, "reed")
    assert "'effect' must be one of 'read', 'write' or 'destructive', found 'reed'" == effect.message
    assert effect.hint == "did you mean 'read'?"
    timeout = by_path["subagents.w.tools.echo.timeout_s"]
    assert (timeout.line, timeout.col) == pos(text, "-1")
    assert "greater than 0" in timeout.message and "found -1" in timeout.message
    cacheable = by_path["subagents.w.tools.echo.cacheable"]
    assert "true or false" in cacheable.message and "'maybe'" in cacheable.message


def test_a_schema_slot_of_the_wrong_type_is_one_finding_at_its_place():
    text = tool_registry(input="[string]")
    _, problems = registry(text)
    p = found(problems, "TL203", at=pos(text, "[string]"), message=("'input_schema' must be a JSON Schema",))
    assert p.path == "subagents.w.tools.echo.input_schema"


@covers("TL204")
def test_unsupported_version():
    text = "version: 2\nsubagents: {}\n"
    _, problems = registry(text)
    found(problems, "TL204", at=(1, 10), message=("version must be 1, found 2",), hint=("version: 1",))


# ---------------------------------------------------------------------------------------------
# TL3xx: registry rules


@covers("TL301")
def test_duplicate_tool_id():
    text = f"""
    version: 1
    app_root: {APP}
    subagents:
      w:
        runner_defaults: {{tool_timeout_s: 5}}
        tools:
          echo:
            callable: testapp.tools:echo
            description: Returns its arguments.
            input_schema: {{}}
            output_schema: {{}}
          echo:
            callable: testapp.tools:echo
            description: The same id again.
            input_schema: {{}}
            output_schema: {{}}
    """
    _, problems = registry(text)
    p = found(problems, "TL301", at=pos(text, "echo:", nth=2),
              message=("duplicate tool id 'echo' in subagent 'w'", f"first defined at line {pos(text, 'echo:')[0]}"),
              hint=("rename one",))
    assert problems == [p]


@covers("TL302")
def test_allowed_tools_names_an_unknown_tool():
    text = tool_registry().replace("tool_timeout_s: 5", "tool_timeout_s: 5\n      allowed_tools: [echo, ehco]")
    _, problems = registry(text)
    found(problems, "TL302", at=pos(text, "ehco"), message=("allowed_tools names 'ehco'", "subagent 'w'"),
          hint=("did you mean 'echo'?",))


@covers("TL303")
def test_dispatch_names_an_unknown_tool():
    text = tool_registry(extra="dispatch: [nothing_like_it]\n")
    _, problems = registry(text)
    found(problems, "TL303", at=pos(text, "nothing_like_it"), message=("dispatches to 'nothing_like_it'",),
          hint=("registered tools: echo",))


@covers("TL304")
def test_callable_without_module_colon_attribute():
    text = tool_registry().replace("testapp.tools:echo", "testapp.tools.echo")
    _, problems = registry(text)
    found(problems, "TL304", at=pos(text, "testapp.tools.echo"), message=("is not 'module:attribute'",),
          hint=("app.tools:run",))


@covers("TL305")
def test_private_segment_is_refused():
    for ref, segment in (("testapp.tools:_hidden", "_hidden"), ("testapp._impl:echo", "_impl")):
        text = tool_registry().replace("testapp.tools:echo", ref)
        _, problems = registry(text)
        found(problems, "TL305", at=pos(text, ref), message=(f"private name '{segment}'",),
              hint=("public function",))


@covers("TL306")
def test_module_that_raises_at_import_is_a_finding(tmp_path, capsys):
    pkg = app_package(tmp_path, {"broken": """
        print("noise while importing")
        raise RuntimeError("kaboom at import")
    """})
    text = tool_registry(app=str(tmp_path)).replace("testapp.tools:echo", f"{pkg}.broken:run")
    _, problems = registry(text)
    found(problems, "TL306", at=pos(text, f"{pkg}.broken:run"),
          message=(f"importing module '{pkg}.broken' failed", "RuntimeError: kaboom at import", "broken.py:2"),
          hint=("fix the error in the module",))
    # what the module printed went to stderr, never into machine-readable standard output
    out = capsys.readouterr()
    assert "noise while importing" not in out.out and "noise while importing" in out.err


def test_missing_module_says_where_it_was_looked_for():
    text = tool_registry().replace("testapp.tools:echo", "testapp.nothere:echo")
    _, problems = registry(text)
    found(problems, "TL306", message=("no module named 'testapp.nothere'",), hint=("app_root", str(APP)))


def test_a_missing_third_party_module_is_one_finding_for_every_tool_that_needs_it(tmp_path):
    pkg = app_package(tmp_path, {
        "tools": "import not_installed_anywhere_xyz\n\ndef a(): pass\n\ndef b(): pass\n",
        "more": "from not_installed_anywhere_xyz.sub import thing\n\ndef c(): pass\n",
    })
    text = dedent(f"""
    version: 1
    app_root: {tmp_path}
    subagents:
      w:
        runner_defaults: {{tool_timeout_s: 5}}
        tools:
          a: {{callable: '{pkg}.tools:a', description: A., input_schema: {{}}, output_schema: {{}}}}
          b: {{callable: '{pkg}.tools:b', description: B., input_schema: {{}}, output_schema: {{}}}}
          c: {{callable: '{pkg}.more:c', description: C., input_schema: {{}}, output_schema: {{}}}}
    """)
    contract, problems = registry(text)
    assert contract is None
    p = found(problems, "TL306", at=pos(text, f"'{pkg}.tools:a'"),
              message=("module 'not_installed_anywhere_xyz' is not installed",
                       f"the App's module '{pkg}.tools' imports it", "needed by tools 'a', 'b', 'c'"),
              hint=("install the package that provides 'not_installed_anywhere_xyz'", "additional_dependencies"))
    assert p.path == "subagents.w.tools.a.callable"


@covers("TL314")
def test_a_coroutine_taken_for_trio_that_calls_an_asyncio_library_gets_a_hint(tmp_path):
    name = app_package(tmp_path, {})
    libs = {f"{name}_aio": "import asyncio\n\nasync def get():\n    await asyncio.sleep(0)\n    return 2\n",
            f"{name}_any": "import asyncio\nimport sniffio\n\nasync def get():\n    return 3\n"}
    for lib, body in libs.items():  # libraries in packages of their own (the App's own package is never suspected)
        (tmp_path / lib).mkdir()
        (tmp_path / lib / "__init__.py").write_text(body)
    (tmp_path / name / "uses.py").write_text(
        f"from {name}_aio import get\nimport {name}_any\n\n"
        "async def run():\n    return await get()\n\n"
        f"async def fine():\n    return await {name}_any.get()\n\n"
        "async def marked():\n    return await get()\n\nmarked.__toolloop_runtime__ = 'trio'\n")
    text = dedent(f"""
    version: 1
    app_root: {tmp_path}
    subagents:
      w:
        runner_defaults: {{tool_timeout_s: 5}}
        tools:
          run: {{callable: '{name}.uses:run', description: R., input_schema: {{}}, output_schema: {{}}}}
          fine: {{callable: '{name}.uses:fine', description: F., input_schema: {{}}, output_schema: {{}}}}
          marked: {{callable: '{name}.uses:marked', description: M., input_schema: {{}}, output_schema: {{}}}}
    """)
    contract, problems = registry(text)
    assert contract is not None  # a warning: the registry still compiles
    found(problems, "TL314", level="warning", at=pos(text, f"'{name}.uses:run'"),
          message=(f"async callable '{name}.uses:run' will run on trio", f"it calls '{name}_aio'", "built on asyncio"),
          hint=("toolloop_cli.asyncio_tool",))
    assert contract.subagents["w"].tools["run"].runtime == "trio"


@covers("TL307")
def test_attribute_not_found():
    text = tool_registry().replace("testapp.tools:echo", "testapp.tools:ecko")
    _, problems = registry(text)
    found(problems, "TL307", at=pos(text, "testapp.tools:ecko"),
          message=("'ecko' is not an attribute of module 'testapp.tools'",), hint=("did you mean 'echo'?",))


@covers("TL308")
def test_non_callable_attribute():
    text = tool_registry().replace("testapp.tools:echo", "testapp.tools:COUNTER_FILE")
    _, problems = registry(text)
    found(problems, "TL308", at=pos(text, "testapp.tools:COUNTER_FILE"), message=("not callable (it is a str)",),
          hint=("point at a function",))


@covers("TL309")
def test_exactly_one_of_callable_or_mcp():
    text = tool_registry(extra="mcp: {command: [server], allow: [x]}\n")
    _, problems = registry(text)
    found(problems, "TL309", at=pos(text, "echo:"), message=("exactly one of 'callable', 'mcp' or 'plan'",
                                                              "found callable and mcp"), hint=("keep one",))
    text = """
    version: 1
    subagents:
      w:
        runner_defaults: {tool_timeout_s: 5}
        tools:
          nothing: {description: No way to run it.}
    """
    _, problems = registry(text, "neither.yml")
    found(problems, "TL309", file="neither.yml", at=pos(text, "nothing:"), message=("found none of them",),
          hint=("callable:",))


@covers("TL310")
def test_missing_timeout():
    text = tool_registry().replace("    runner_defaults:\n      tool_timeout_s: 5\n", "")
    _, problems = registry(text)
    found(problems, "TL310", at=pos(text, "echo:"), message=("tool 'echo' has no timeout",),
          hint=("timeout_s", "runner_defaults.tool_timeout_s"))
    # a default from the caller (the command line's --timeout) is a timeout too
    contract, problems = load_registry("reg.yml", default_timeout_s=30)
    assert problems == [] and contract.subagents["w"].tools["echo"].timeout_s == 30


@covers("TL311")
def test_process_isolation_on_an_async_callable():
    text = tool_registry(extra="isolation: process\n").replace("testapp.tools:echo", "testapp.tools:sleep_async")
    _, problems = registry(text)
    found(problems, "TL311", at=pos(text, "process"), message=("sync callables only", "sleep_async"),
          hint=("remove 'isolation'",))


@covers("TL312")
def test_app_root_that_is_not_a_folder():
    text = tool_registry(app="no_such_folder")
    _, problems = registry(text)
    # one finding: the callables that cannot be resolved without it are not reported again
    p = found(problems, "TL312", at=pos(text, "no_such_folder"), message=("is not a folder",),
              hint=("relative to the registry file",))
    assert problems == [p]


@covers("TL320")
def test_schema_that_fails_meta_validation():
    text = tool_registry(input="{type: objekt}")
    _, problems = registry(text)
    found(problems, "TL320", at=pos(text, "objekt"), message=("input_schema is not a valid JSON Schema", "'objekt'"),
          hint=("did you mean 'object'?",))
    text = tool_registry(output="{type: object, additionalProperties: 3}")
    _, problems = registry(text, "again.yml")
    # the meta-schema reaches some keywords along several paths: still one finding
    found(problems, "TL320", file="again.yml", at=pos(text, "3}"), message=("output_schema",))
    # a pattern the validator cannot compile is reported at its own place; ECMA 262 classes are fine
    text = tool_registry(output=r"{type: object, properties: {a: {pattern: '^\p{L}+$'}, b: {pattern: '(x'}}}")
    _, problems = registry(text, "regex.yml")
    p = found(problems, "TL320", file="regex.yml", at=pos(text, "'(x'"),
              message=("pattern '(x' is not a valid regular expression",), hint=("ECMA 262",))
    assert p.path == "subagents.w.tools.echo.output_schema.properties.b.pattern"


@covers("TL321")
def test_remote_ref_is_refused_and_nothing_is_fetched(monkeypatch):
    attempts = []

    def no_network(self, address):
        attempts.append(address)
        raise AssertionError(f"toolloop tried to connect to {address}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket.socket, "connect_ex", no_network)
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: no_network(None, a))
    text = tool_registry(input="{type: object, properties: {a: {$ref: 'http://127.0.0.1:9/schema.json'}}}")
    _, problems = registry(text)
    found(problems, "TL321", at=pos(text, "'http://"), message=("points outside this document",),
          hint=("#/$defs/name",))
    text = tool_registry(input="{$ref: 'other.json#/a'}")
    _, problems = registry(text, "file.yml")
    found(problems, "TL321", file="file.yml", message=("'other.json#/a'",))
    # and the validator the engine compiles is offline whatever it is given
    from toolloop_cli.contract.schemas import compile_validator

    with pytest.raises(Exception):
        compile_validator({"$ref": "http://127.0.0.1:9/schema.json"}, mask=False)
    assert attempts == []


@covers("TL322")
def test_local_ref_that_does_not_resolve():
    text = tool_registry(input="{$defs: {name: {type: string}}, $ref: '#/$defs/nmae'}")
    _, problems = registry(text)
    found(problems, "TL322", at=pos(text, "'#/$defs/nmae'"), message=("does not resolve inside this document",))
    contract, problems = registry(tool_registry(input="{$defs: {name: {type: string}}, $ref: '#/$defs/name'}"), "ok.yml")
    assert problems == [] and contract is not None


ENVELOPE_OUTPUT = "{type: object, additionalProperties: false, properties: {state: {type: string}, note: {type: string}}}"


@covers("TL330")
def test_control_envelope_errors():
    # a missing graph is a missing key of the envelope mapping
    text = tool_registry(extra="control_envelope: {version: 1, role: producer}\n")
    _, problems = registry(text)
    found(problems, "TL202", at=pos(text, "control_envelope"), message=("required key 'graph' is missing",))
    # a status in both lists
    text = tool_registry(output=ENVELOPE_OUTPUT, extra="""
    control_envelope:
      version: 1
      role: producer
      graph: {status_field: state, continue_statuses: [ok, retry], stop_statuses: [done, retry]}
    """)
    _, problems = registry(text, "overlap.yml")
    found(problems, "TL330", file="overlap.yml", at=pos(text, "retry]", nth=2),
          message=("status 'retry' is in both continue_statuses and stop_statuses",), hint=("envelope",))
    # a mapped field the closed output schema does not declare
    text = tool_registry(output=ENVELOPE_OUTPUT, extra="""
    control_envelope:
      version: 1
      role: producer
      graph: {status_field: status, continue_statuses: [ok], stop_statuses: [done]}
      handoff_fields: [note, extra]
    """)
    _, problems = registry(text, "closed.yml")
    assert codes(problems) == ["TL330", "TL330"]
    assert [(p.line, p.col) for p in problems] == [pos(text, "status,"), pos(text, "extra]")]
    assert "graph.status_field 'status' is not a property of the closed output_schema" in problems[0].message
    assert "handoff field 'extra'" in problems[1].message


@covers("TL340")
def test_redact_entry_that_is_not_a_pointer():
    text = tool_registry(extra="redact: [password, /a~2b]\n")
    _, problems = registry(text)
    assert codes(problems) == ["TL340", "TL340"]
    first, second = problems
    assert (first.line, first.col) == pos(text, "password")
    assert "'password' is not a JSON Pointer" in first.message and first.hint == "write '/password'"
    assert (second.line, second.col) == pos(text, "/a~2b") and "~0" in second.hint


@covers("TL341")
def test_redact_pointer_that_can_never_match_is_a_warning():
    closed = "{type: object, additionalProperties: false, properties: {user: {type: string}}}"
    text = tool_registry(input=closed, output=closed, extra="redact: [/password, /user]\n")
    contract, problems = registry(text)
    found(problems, "TL341", level="warning", at=pos(text, "/password"),
          message=("'/password' can never match",), hint=("fix the pointer",))
    assert contract is not None  # a warning does not reject the registry
    # a pointer through $ref into a closed object, and wildcards, are followed too
    deep = ("{$defs: {creds: {type: object, additionalProperties: false, properties: {key: {type: string}}}},"
            " type: object, properties: {creds: {$ref: '#/$defs/creds'}, list: {type: array, items: {$ref: '#/$defs/creds'}}}}")
    text = tool_registry(input=deep, output=deep, extra="redact: [/creds/key, /creds/nope, /list/*/key, /*/key]\n")
    _, problems = registry(text, "deep.yml")
    found(problems, "TL341", level="warning", file="deep.yml", message=("'/creds/nope'",))


@covers("TL342")
def test_secret_looking_property_not_redacted_is_a_warning():
    schema = "{type: object, properties: {user: {type: string}, api_token: {type: string}}}"
    text = tool_registry(input=schema)
    contract, problems = registry(text)
    p = found(problems, "TL342", level="warning", at=pos(text, "api_token"),
              message=("property 'api_token' of input_schema looks like a secret",),
              hint=("add '/api_token' to redact", "writeOnly: true"))
    assert p.path == "subagents.w.tools.echo.input_schema.properties.api_token"
    assert contract is not None
    # redacted, marked writeOnly, or under a redacted or writeOnly parent: no warning
    for extra, inp in (
        ("redact: [/api_token]\n", schema),
        ("", "{type: object, properties: {api_token: {type: string, writeOnly: true}}}"),
        ("redact: [/auth]\n", "{type: object, properties: {auth: {type: object, properties: {password: {type: string}}}}}"),
        ("", "{type: object, properties: {auth: {writeOnly: true, type: object, properties: {secret: {}}}}}"),
        ("redact: ['/rows/*/password']\n", "{type: object, properties: {rows: {type: array, items: {properties: {password: {}}}}}}"),
    ):
        _, problems = registry(tool_registry(input=inp, extra=extra), "quiet.yml")
        assert problems == [], (extra, inp, problems)


@covers("TL350")
def test_approval_expression_that_does_not_compile():
    pytest.importorskip("celpy")
    text = tool_registry(extra="approval: {when: 'args.amount >'}\n")
    _, problems = registry(text)
    found(problems, "TL350", at=pos(text, "'args.amount >'"), message=("does not compile",), hint=("CEL",))


@covers("TL351")
def test_inconsistent_retry_policy():
    text = tool_registry(extra="retry: {max_attempts: 3, backoff_s: 5, max_backoff_s: 1}\n")
    _, problems = registry(text)
    found(problems, "TL351", at=pos(text, "1}"), message=("max_backoff_s (1.0) is below retry.backoff_s (5.0)",),
          hint=("raise max_backoff_s",))
    text = tool_registry(extra="retry: {max_attempts: 3, on: []}\n")
    _, problems = registry(text, "never.yml")
    found(problems, "TL351", file="never.yml", at=pos(text, "[]"), message=("nothing is ever retried",))


@covers("TL352")
def test_a_write_that_is_not_idempotent_may_not_be_retried_after_a_timeout():
    for effect in ("write", "destructive"):
        text = tool_registry(extra=f"effect: {effect}\nretry: {{max_attempts: 3, on: [error, timeout]}}\n")
        _, problems = registry(text, f"{effect}.yml")
        found(problems, "TL352", file=f"{effect}.yml", at=pos(text, "timeout]"),
              message=("'echo'", f"effect: {effect}", "never retried after a timeout"),
              hint=("remove timeout from retry.on", "idempotent: true"))
    # an idempotent write, and a read, may say so
    for extra in ("effect: write\nidempotent: true\napproval: required\n", "effect: read\n"):
        contract, problems = registry(tool_registry(extra=extra + "retry: {max_attempts: 3, on: [timeout]}\n"), "fine.yml")
        assert problems == [] and contract.subagents["w"].tools["echo"].retry.on == {"timeout"}
    # left to the default, such a write is retried after errors only
    contract, problems = registry(tool_registry(extra="effect: write\napproval: required\nretry: {max_attempts: 3}\n"),
                                  "default.yml")
    assert problems == [] and contract.subagents["w"].tools["echo"].retry.on == {"error"}


@covers("TL353")
def test_a_write_without_an_approval_gate_is_a_warning():
    for effect in ("write", "destructive"):
        text = tool_registry(extra=f"effect: {effect}\n")
        contract, problems = registry(text, f"{effect}.yml")
        assert contract is not None  # a warning: the registry still compiles
        found(problems, "TL353", file=f"{effect}.yml", at=pos(text, f"effect: {effect}"), level="warning",
              message=("'echo'", f"effect: {effect}", "no approval gate"), hint=("approval: required",))
    _, problems = registry(tool_registry(extra="effect: write\napproval: {when: 'args.amount > 5'}\n"), "gated.yml")
    assert [p.code for p in problems] == []


@covers("TL360")
def test_evidence_hook_that_does_not_resolve():
    text = tool_registry().replace("app_root:", "evidence: testapp.tools:no_hook\napp_root:")
    _, problems = registry(text)
    found(problems, "TL360", at=pos(text, "testapp.tools:no_hook"), message=("evidence hook", "'no_hook'"))


@covers("TL370", "TL371")
def test_lock_missing_then_drift_names_the_tool():
    from typer.testing import CliRunner

    from toolloop_cli.cli.app import app

    text = tool_registry()
    write("reg.yml", text)
    runner = CliRunner()
    result = runner.invoke(app, ["validate", "reg.yml", "--locked", "--format", "json"])
    assert result.exit_code == 1
    import json

    (missing,) = [Problem(**p) for p in json.loads(result.stdout)]
    assert missing.code == "TL371" and missing.file == "reg.yml" and "toolloop.lock does not exist" in missing.message
    assert "toolloop lock reg.yml" in missing.hint
    assert runner.invoke(app, ["lock", "reg.yml"]).exit_code == 0
    assert runner.invoke(app, ["validate", "reg.yml", "--locked"]).exit_code == 0
    write("reg.yml", text.replace("Returns its arguments.", "Returns what it was given."))
    result = runner.invoke(app, ["validate", "reg.yml", "--locked", "--format", "json"])
    assert result.exit_code == 1
    (drift,) = [Problem(**p) for p in json.loads(result.stdout)]
    assert drift.code == "TL370" and (drift.line, drift.col) == pos(text, "echo:")
    assert "tool 'w/echo' changed since toolloop.lock was written" == drift.message
    Path("toolloop.lock").write_text("{not json")
    result = runner.invoke(app, ["validate", "reg.yml", "--locked", "--format", "json"])
    (broken,) = [Problem(**p) for p in json.loads(result.stdout)]
    assert broken.code == "TL371" and broken.file == "toolloop.lock" and "unreadable" in broken.message


# ---------------------------------------------------------------------------------------------
# many mistakes, one run


def test_every_mistake_in_one_file_is_reported_sorted_by_line():
    text = f"""
    version: 1
    app_root: {APP}
    subagents:
      w:
        runner_defaults:
          allowed_tools: [echo, privy, schemer, ghost]
          tool_timeout_s: 5
        tools:
          echo:
            callable: testapp.tools:echo
            description: Returns its arguments.
            input_schema: {{type: object, properties: {{password: {{type: string}}}}}}
            output_schema: {{}}
          privy:
            callable: testapp.tools:_private
            description: Private.
            input_schema: {{}}
            output_schema: {{}}
          typo:
            callable: testapp.tools:echo
            descripton: Misspelled.
            input_schema: {{}}
            output_schema: {{}}
          schemer:
            callable: testapp.tools:echo
            description: Bad schema.
            input_schema: {{type: objekt}}
            output_schema: {{}}
            effect: sideways
    """
    _, problems = registry(text)
    got = [(p.code, p.level, p.line) for p in problems]
    assert got == [
        ("TL302", "error", pos(text, "ghost")[0]),
        ("TL342", "warning", pos(text, "password")[0]),
        ("TL305", "error", pos(text, "_private")[0]),
        ("TL201", "error", pos(text, "descripton")[0]),
        ("TL203", "error", pos(text, "sideways")[0]),
    ], got
    assert [p.line for p in problems] == sorted(p.line for p in problems)
    # the broken 'schemer' tool is left out of further checks, so its bad schema waits for the
    # type error to be fixed; fixing it reveals the schema problem at its own line
    _, problems = registry(text.replace("effect: sideways", "effect: read"), "again.yml")
    assert ("TL320", pos(text, "objekt")[0]) in [(p.code, p.line) for p in problems]


# ---------------------------------------------------------------------------------------------
# TL4xx: plan admission

PLAN_REGISTRY = f"""
version: 1
app_root: {APP}
subagents:
  w:
    runner_defaults:
      allowed_tools: [echo, hold]
      max_calls: 4
      tool_timeout_s: 5
    tools:
      echo:
        callable: testapp.tools:echo
        description: Returns its arguments.
        input_schema: {{type: object, additionalProperties: false, properties: {{text: {{type: string}}}}}}
        output_schema: {{}}
        max_calls: 1
      hold:
        callable: testapp.tools:hold
        description: Holds a key.
        input_schema: {{type: object, required: [key], properties: {{key: {{type: string}}}}}}
        output_schema: {{}}
      marker:
        callable: testapp.tools:marker
        description: Not allowed in runs of w.
        input_schema: {{}}
        output_schema: {{}}
"""


def plan(text: str, name: str = "plan.yml") -> Path:
    write("reg.yml", PLAN_REGISTRY)
    return write(name, "version: 1\nregistry: reg.yml\n" + dedent(text))


def plan_pos(text: str, needle: str, nth: int = 1) -> tuple[int, int]:
    line, col = pos(text, needle, nth)
    return line + 2, col  # the two header lines plan() adds


SEQ = """
subagent: w
mode: sequential
calls:
  - tool: ecko
    args: {text: hi}
  - tool: marker
    args: {path: x}
  - tool: echo
    call_key: same
    args: {text: 3}
  - tool: echo
    call_key: same
    args: {text: ok}
"""


def test_a_good_plan_is_admitted():
    admitted = admit_plan(plan("subagent: w\nmode: sequential\ncalls:\n  - {tool: echo, args: {text: hi}}\n"))
    assert [c.call_key for c in admitted.calls] == ["0"]


@covers("TL402", "TL403", "TL404", "TL406", "TL408")
def test_sequential_plan_problems_all_at_once():
    problems = rejected(plan(SEQ))
    assert [p.line for p in problems] == sorted(p.line for p in problems)
    found(problems, "TL402", file="plan.yml", at=plan_pos(SEQ, "ecko"), message=("unknown tool 'ecko'",),
          hint=("did you mean 'echo'?",))
    found(problems, "TL403", file="plan.yml", at=plan_pos(SEQ, "marker"),
          message=("'marker' is not in runner_defaults.allowed_tools",), hint=("allowed_tools",))
    found(problems, "TL404", file="plan.yml", at=plan_pos(SEQ, "{text: 3}"),
          message=("fail its input_schema", "3 is not of type \"string\""), hint=("exactly the arguments",))
    found(problems, "TL406", file="plan.yml", at=plan_pos(SEQ, "same", nth=2),
          message=("duplicate call_key 'same'",), hint=("its own call_key",))
    found(problems, "TL408", file="plan.yml", message=("calls 'echo' 2 times", "max_calls is 1"),
          hint=("raise its max_calls",))


@covers("TL401")
def test_unknown_subagent():
    text = "subagent: ww\nmode: sequential\ncalls: []\n"
    found(rejected(plan(text)), "TL401", file="plan.yml", at=plan_pos(text, "ww"),
          message=("unknown subagent 'ww'",), hint=("did you mean 'w'?",))


@covers("TL405", "TL409")
def test_parallel_plan_problems():
    text = """
    subagent: w
    mode: parallel
    max_concurrency: 0
    lanes:
      - item_key: doc
        calls: [{tool: hold, args: {key: a}}]
      - item_key: doc
        calls: [{tool: hold, args: {key: b}}]
    """
    problems = rejected(plan(text))
    found(problems, "TL405", file="plan.yml", at=plan_pos(text, "doc", nth=2), message=("duplicate item_key 'doc'",))
    found(problems, "TL409", file="plan.yml", at=plan_pos(text, "0"), message=("at least 1, found 0",))
    text = text.replace("    max_concurrency: 0\n", "")
    problems = rejected(plan(text, "missing.yml"))
    found(problems, "TL409", file="missing.yml", message=("max_concurrency is missing",), hint=("--max-concurrency",))


@covers("TL407")
def test_plan_over_the_subagent_max_calls():
    text = "subagent: w\nmode: sequential\ncalls:\n" + "  - {tool: hold, args: {key: a}}\n" * 5
    found(rejected(plan(text)), "TL407", file="plan.yml", message=("makes 5 calls", "allows 4"),
          hint=("runner_defaults.max_calls",))


ROUTED = """
subagent: w
mode: routed
goal: Say hello.
allowed_tools: [echo, marker]
router_profile: {provider: openia, model: m1}
budget: {max_iterations: 2, max_tokens: 100, max_tool_calls: 2, timeout_s: 10}
"""


@covers("TL410", "TL411")
def test_routed_plan_problems():
    problems = rejected(plan(ROUTED))
    tl410 = [p for p in problems if p.code == "TL410"]
    assert [(p.line, p.col) for p in tl410] == [(1, 1), plan_pos(ROUTED, "openia")]
    assert "needs 'final_profile'" in tl410[0].message and "unknown provider 'openia'" in tl410[1].message
    found(problems, "TL411", file="plan.yml", at=plan_pos(ROUTED, "marker"), message=("'marker' is not in",))


@covers("TL412")
def test_plan_registry_not_found():
    path = write("plan.yml", "version: 1\nregistry: nowhere.yml\nsubagent: w\nmode: sequential\ncalls: []\n")
    found(rejected(path), "TL412", file="plan.yml", at=(2, 11), message=("registry not found", "nowhere.yml"),
          hint=("--registry",))


@covers("TL205")
def test_key_not_used_in_this_mode():
    text = "subagent: w\nmode: sequential\ncalls: []\nmax_concurrency: 2\n"
    found(rejected(plan(text)), "TL205", file="plan.yml", at=plan_pos(text, "max_concurrency"),
          message=("'max_concurrency' is not used in sequential mode",), hint=("mode: parallel",))


@covers("TL413")
def test_lane_payload_that_cannot_feed_a_call():
    text = """
    subagent: w
    mode: parallel
    max_concurrency: 2
    lanes:
      - item_key: doc
        payload: {text: 5}
        calls: [{tool: echo}]
    """
    found(rejected(plan(text)), "TL413", file="plan.yml", message=("payload",))


@covers("TL414")
def test_lanes_input_line_that_is_not_a_lane():
    path = plan("subagent: w\nmode: parallel\nmax_concurrency: 2\nlanes: []\n")
    stream = io.BytesIO(b'{"item_key": "a", "calls": [{"tool": "echo", "args": {}}]}\nnot json\n[1, 2]\n')
    problems = rejected(path, lanes=stream, lanes_name="lanes.jsonl")
    assert [(p.code, p.file, p.line, p.col) for p in problems] == [
        ("TL414", "lanes.jsonl", 2, 1),
        ("TL414", "lanes.jsonl", 3, 1),
    ]
    assert "not JSON" in problems[0].message and "not a lane object" in problems[1].message


@covers("TL415")
def test_missing_empty_or_broken_prompt_fails_closed(monkeypatch, tmp_path):
    import importlib.resources

    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "router.md").write_text("   \n")  # empty; final.md is missing
    (prompts / "repair.md").write_text("<!-- turn -->\n{errors}\n")  # no 'error' section
    real = importlib.resources.files
    monkeypatch.setattr(importlib.resources, "files",
                        lambda package: prompts if package == "toolloop_cli.prompts" else real(package))
    text = ROUTED.replace("openia", "openai").replace(", marker]", "]") + "final_profile: {provider: openai, model: m2}\n"
    problems = rejected(plan(text))
    assert [p.code for p in problems] == ["TL415", "TL415", "TL415"]
    assert sorted(p.message for p in problems) == [
        "prompt file 'final.md' is missing or empty in the installed package",
        "prompt file 'repair.md' is broken: missing section(s): error",
        "prompt file 'router.md' is missing or empty in the installed package",
    ]
    assert all("reinstall" in p.hint for p in problems)


# A routed plan that admits; tests add one broken thing at a time.
GOOD_ROUTED = """
subagent: w
mode: routed
goal: Say hello.
allowed_tools: [echo]
router_profile: {provider: openai, model: m1, api_key_env: KEY}
final_profile: {provider: openai, model: m2, api_key_env: KEY}
budget: {max_iterations: 2, max_tokens: 100, max_tool_calls: 2, timeout_s: 10}
"""


def test_the_base_routed_plan_admits():
    assert admit_plan(plan(GOOD_ROUTED)).routed is not None


@covers("TL416")
def test_files_the_plan_names_must_exist_and_not_be_empty():
    write("prompts/empty.md", "\n  \n")
    text = GOOD_ROUTED + dedent("""
    instructions: prompts/missing.md
    supervisor:
      judge: {profile: {provider: openai, model: j}, prompt: prompts/empty.md}
      on_violation: abort
    """)
    problems = rejected(plan(text))
    assert codes(problems) == ["TL416", "TL416"]
    first, second = problems
    assert (first.line, first.col) == plan_pos(text, "prompts/missing.md")
    assert first.message == "instructions file not found: 'prompts/missing.md'" and "relative to the plan" in first.hint
    assert (second.line, second.col) == plan_pos(text, "prompts/empty.md")
    assert second.message == "judge prompt file is empty: 'prompts/empty.md'"
    text = GOOD_ROUTED.replace("provider: openai, model: m2, api_key_env: KEY", "provider: replay, fixture: none.jsonl")
    found(rejected(plan(text)), "TL416", file="plan.yml", at=plan_pos(text, "none.jsonl"),
          message=("fixture file not found", "none.jsonl"), hint=("runs export",))


@covers("TL417")
def test_context_that_fails_the_inputs_schema():
    text = GOOD_ROUTED + dedent("""
    inputs: {type: object, required: [customer], properties: {customer: {type: string}}}
    context: {customer: 42}
    """)
    found(rejected(plan(text)), "TL417", file="plan.yml", at=plan_pos(text, "{customer: 42}"),
          message=("context fails the plan's inputs schema", "at /customer: 42 is not of type \"string\""),
          hint=("matches 'inputs'",))
    text = GOOD_ROUTED + "inputs: {type: object, required: [customer]}\n"
    found(rejected(plan(text)), "TL417", file="plan.yml", at=plan_pos(text, "inputs"),
          message=("\"customer\" is a required property",))


@covers("TL418")
def test_outcomes_that_reuse_engine_names_or_cannot_be_held():
    text = GOOD_ROUTED + "outcomes: [resolved, timeout, resolved]\n"
    problems = rejected(plan(text))
    assert codes(problems) == ["TL418", "TL418"]
    assert problems[0].message == "outcome 'timeout' is one of the loop's own outcomes"
    assert (problems[0].line, problems[0].col) == plan_pos(text, "timeout,")
    assert problems[1].message == "outcome 'resolved' is declared twice"
    for schema in ("{type: object, additionalProperties: false, properties: {total: {type: number}}}",
                   "{type: array}",
                   "{type: object, properties: {outcome: {enum: [done]}}}",
                   "{type: object, properties: {outcome: {type: integer}}}"):
        text = GOOD_ROUTED + f"outcomes: [resolved]\nfinal_schema: {schema}\n"
        found(rejected(plan(text)), "TL418", file="plan.yml", at=plan_pos(text, "final_schema"),
              message=("final_schema cannot hold an 'outcome' key",), hint=("property 'outcome'",))
    for schema in ("{type: object, properties: {outcome: {type: string}}, required: [outcome]}",
                   "{type: object, additionalProperties: false, properties: {outcome: {enum: [resolved, x]}}}",
                   "{type: object}"):
        assert admit_plan(plan(GOOD_ROUTED + f"outcomes: [resolved]\nfinal_schema: {schema}\n")).routed.outcomes == ("resolved",)


@covers("TL419")
def test_routes_name_declared_or_engine_outcomes():
    text = GOOD_ROUTED + "outcomes: [resolved]\nroutes: {resolved: reply, max_iteration: queue, final: done}\n"
    found(rejected(plan(text)), "TL419", file="plan.yml", at=plan_pos(text, "max_iteration:"),
          message=("route 'max_iteration' is neither a declared outcome",), hint=("did you mean 'max_iterations'?",))


@covers("TL420")
def test_supervisor_problems():
    text = GOOD_ROUTED + dedent("""
    supervisor:
      rules:
        - {when: tool_repeated}
        - {when: budget_fraction, gt: 0.5, count: 2}
        - {when: effect_count, effect: write, count: 1}
    """)
    problems = rejected(plan(text))
    assert codes(problems) == ["TL420", "TL420", "TL420"]
    assert [p.message for p in problems] == [
        "the supervisor needs 'on_violation' when it has rules or a judge",
        "rule 'tool_repeated' needs 'count'",
        "rule 'budget_fraction' takes no 'count'",
    ]
    assert (problems[2].line, problems[2].col) == plan_pos(text, "count: 2")
    text = GOOD_ROUTED + "supervisor:\n  rules: [{when: iteration_reached, gte: 3}]\n  on_violation: steer\n"
    found(rejected(plan(text)), "TL420", file="plan.yml", at=plan_pos(text, "on_violation"),
          message=("on_violation: steer needs a steer_message",))


@covers("TL421")
def test_fixture_line_that_is_not_a_model_answer():
    write("fixtures/run.jsonl", '{"type": "receipt"}\n{"type": "model_answer", "n": 1, "role": "router"}\n')
    text = GOOD_ROUTED.replace("provider: openai, model: m1, api_key_env: KEY", "provider: replay, fixture: fixtures/run.jsonl")
    found(rejected(plan(text)), "TL421", file="fixtures/run.jsonl", at=(2, 1),
          message=("model_answer record", "'text' is missing or not a string"), hint=("runs export",))


def test_guardrails_resolve_like_tool_callables():
    text = GOOD_ROUTED + "guardrails:\n  observations: [testapp.tools:echo, testapp.tools:nope]\n  final: [testapp._private:x]\n"
    problems = rejected(plan(text))
    assert codes(problems) == ["TL307", "TL305"]
    assert problems[0].message.startswith("guardrail: 'testapp.tools:nope'")
    assert (problems[0].line, problems[0].col) == plan_pos(text, "testapp.tools:nope")


def test_prices_are_needed_with_max_cost_and_profiles_need_models():
    text = GOOD_ROUTED.replace("timeout_s: 10}", "timeout_s: 10, max_cost_usd: 0.5}").replace(
        "model: m1, api_key_env: KEY", "model: m1, api_key_env: KEY, price: {input_per_mtok: 0.4, output_per_mtok: 1.6}")
    p = found(rejected(plan(text)), "TL410", file="plan.yml", at=plan_pos(text, "final_profile"),
              message=("max_cost_usd needs a price", "final_profile has none"), hint=("input_per_mtok",))
    assert "router_profile" not in p.message
    text = GOOD_ROUTED.replace("model: m2, api_key_env: KEY", "api_key_env: sk-live-abc123")
    problems = rejected(plan(text))
    assert [p.message for p in problems] == [
        "provider 'openai' needs a model",
        "api_key_env must name an environment variable (letters, digits, '_'), not hold a key",
    ]
    assert all("sk-live" not in p.message + p.hint for p in problems)


# ---------------------------------------------------------------------------------------------


def test_every_code_is_tested():
    untested = sorted(set(CODES) - COVERED)
    assert not untested, f"finding codes without a test in {Path(__file__).name}: {untested}"


def test_every_code_is_used_by_the_package():
    """A code nobody can produce is a bug: the package source names every code in CODES."""
    source = "".join(p.read_text() for p in (ROOT / "toolloop_cli").rglob("*.py") if p.name != "problems.py")
    unused = sorted(code for code in CODES if f'"{code}"' not in source)
    assert unused == [], unused


def test_an_attribute_lookup_that_raises_is_a_finding(tmp_path):
    pkg = app_package(tmp_path, {"lazy": """
        def __getattr__(name):
            raise RuntimeError(f"cannot load {name}")
    """})
    text = tool_registry(app=str(tmp_path)).replace("testapp.tools:echo", f"{pkg}.lazy:run")
    _, problems = registry(text)
    found(problems, "TL307", at=pos(text, f"{pkg}.lazy:run"), message=("reading 'run' raised RuntimeError: cannot load run",))


@covers("TL313")
def test_mcp_server_that_cannot_start_or_lacks_an_allowed_tool():
    import shutil

    server = shutil.which("mcp-server-time") or str(Path(sys.executable).parent / "mcp-server-time")
    text = f"""
    version: 1
    subagents:
      w:
        runner_defaults: {{tool_timeout_s: 5}}
        tools:
          missing:
            mcp: {{command: [no-such-mcp-server-here], allow: [anything]}}
          clock:
            mcp: {{command: [{server}], allow: [get_current_tim]}}
    """
    path = write("reg.yml", text)
    plan_path = write("plan.yml", "version: 1\nregistry: reg.yml\nsubagent: w\nmode: sequential\ncalls: []\n")
    problems = rejected(plan_path)
    by_tool = {p.path: p for p in problems}
    assert [p.code for p in problems] == ["TL313", "TL313"]
    gone = by_tool["subagents.w.tools.missing.mcp"]
    assert (gone.file, gone.line) == ("reg.yml", pos(text, "missing:")[0]) and "could not be started" in gone.message
    typo = by_tool["subagents.w.tools.clock.mcp"]
    assert "offers no tool 'get_current_tim'" in typo.message and "get_current_time" in typo.hint
    assert path.exists()


@covers("TL315")
def test_a_plan_tool_whose_file_is_not_a_plan(tmp_path):
    text = """
    version: 1
    subagents:
      w:
        runner_defaults: {tool_timeout_s: 5}
        tools:
          agent: {plan: missing.yml, description: An agent.}
    """
    _, problems = registry(text)
    found(problems, "TL315", at=pos(text, "missing.yml"), message=("plan tool 'agent'", "not a readable plan file"),
          hint=("relative to the registry file",))


@covers("TL422")
def test_a_child_plan_past_max_depth_or_not_routed_rejects_its_parent(tmp_path):
    import json

    from conftest import APP, write
    from toolloop_cli.errors import ConfigError
    from toolloop_cli.plan.admit import admit_plan

    write(tmp_path / "child.yml", "version: 1\nregistry: reg.yml\nsubagent: w\nmode: sequential\ncalls: []\n")
    reg = write(tmp_path / "reg.yml", f"""
        version: 1
        app_root: {APP}
        subagents:
          w:
            runner_defaults: {{tool_timeout_s: 5, max_depth: 1}}
            tools:
              agent: {{plan: child.yml, description: An agent.}}
    """)
    plan = write(tmp_path / "plan.yml", json.dumps({"version": 1, "registry": str(reg), "subagent": "w",
                                                    "mode": "sequential", "calls": [{"tool": "agent", "args": {}}]}))
    with pytest.raises(ConfigError) as exc:
        admit_plan(plan)
    shown = exc.value.problems[0].file
    assert shown.endswith("reg.yml")
    found(exc.value.problems, "TL422", file=shown, at=(7, 7), message=("plan tool 'agent'", "not a routed plan"),
          hint=("child plan",))
    with pytest.raises(ConfigError) as exc:
        admit_plan(plan, depth=1, max_depth=1)
    found(exc.value.problems, "TL422", file=shown, at=(7, 7), message=("past runner_defaults.max_depth (1)",))


@covers("TL316", "TL317")
def test_mcp_tool_of_unknown_effect_and_a_server_neither_stdio_nor_http():
    text = """
    version: 1
    subagents:
      w:
        runner_defaults: {tool_timeout_s: 5}
        tools:
          clock:
            mcp: {command: [mcp-server-time], allow: [get_current_time]}
          both:
            mcp: {command: [srv], url: "http://127.0.0.1:1/mcp", allow: [x]}
            effect: read
    """
    contract, problems = registry(text)
    assert contract is None
    unknown = found(problems, "TL316", level="warning", at=pos(text, "clock:"),
                    message=("effect of MCP tool 'clock' is unknown", "treated as 'write'"),
                    hint=("set effect:", "trusted: true"))
    assert unknown.path == "subagents.w.tools.clock"
    found(problems, "TL317", at=pos(text, "mcp:", 2), message=("exactly one of 'command' or 'url', found both",))


@covers("TL372")
def test_mcp_server_whose_schemas_changed_since_the_lock():
    import json
    import shutil

    from typer.testing import CliRunner

    from toolloop_cli.cli.app import app

    server = shutil.which("mcp-server-time") or str(Path(sys.executable).parent / "mcp-server-time")
    text = f"""
    version: 1
    subagents:
      w:
        runner_defaults: {{tool_timeout_s: 20}}
        tools:
          clock:
            mcp: {{command: [{server}], allow: [get_current_time]}}
            effect: read
    """
    write("reg.yml", text)
    runner = CliRunner()
    assert runner.invoke(app, ["lock", "reg.yml"]).exit_code == 0
    lock = json.loads(Path("toolloop.lock").read_text())
    entry = lock["registries"]["reg.yml"]
    assert list(entry["mcp"]) == ["w/clock"]
    entry["mcp"]["w/clock"] = "0" * 64  # as if the server's schemas were different when it was locked
    Path("toolloop.lock").write_text(json.dumps(lock))
    result = runner.invoke(app, ["validate", "reg.yml", "--format", "json"])
    assert result.exit_code == 1
    (changed,) = [Problem(**{k: v for k, v in f.items()}) for f in json.loads(result.stdout)]
    assert changed.code == "TL372" and (changed.line, changed.col) == pos(text, "clock:")
    assert "the schemas of tool 'get_current_time' on MCP server" in changed.message
    assert "changed since toolloop.lock was written (tool 'w/clock')" in changed.message
    assert "toolloop lock reg.yml" in changed.hint
    plan_path = write("plan.yml", "version: 1\nregistry: reg.yml\nsubagent: w\nmode: sequential\ncalls: []\n")
    assert codes(rejected(plan_path)) == ["TL372"]


def _value_at(text: str, needle: str) -> tuple[int, int]:
    line, col = pos(text, needle)
    return line, col + needle.index(": ") + 2


@covers("TL318", "TL319")
def test_sandbox_on_what_cannot_be_sandboxed_and_a_sandbox_block_out_of_place(tmp_path):
    text = tool_registry(extra="isolation: sandbox\n").replace("testapp.tools:echo", "testapp.tools:sleep_async")
    _, problems = registry(text)
    found(problems, "TL318", at=_value_at(text, "isolation: sandbox"), message=("sync callables only", "an async callable"),
          hint=("remove isolation: sandbox",))
    text = tool_registry(extra="sandbox: {network: host}\n")
    _, problems = registry(text)
    found(problems, "TL319", at=pos(text, "sandbox: {"), message=("has a sandbox block but isolation: thread",),
          hint=("set isolation: sandbox",))
    text = tool_registry(extra="isolation: sandbox\nsandbox: {env: [HOME, 'A=B']}\n")
    _, problems = registry(text)
    assert sorted(p.message.split(", ")[-1] for p in problems if p.code == "TL319") == [
        "which a sandbox always sets (to the private /tmp)", "which is not a variable name"]
    write("child.yml", "version: 1\nregistry: reg.yml\nsubagent: w\nmode: routed\n")
    text = TOOL.format(app=APP, input="{}", output="{}", extra="      agent: {plan: child.yml, isolation: sandbox}\n")
    _, problems = registry(text)
    found(problems, "TL318", at=_value_at(text, "isolation: sandbox"), message=("tool 'agent' is a plan tool",))


@covers("TL380", "TL423")
def test_a_sandbox_that_cannot_be_made_here(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLLOOP_BWRAP", str(tmp_path / "no-bwrap"))
    text = tool_registry(extra="isolation: sandbox\n")
    contract, problems = registry(text)
    found(problems, "TL380", level="warning", at=_value_at(text, "isolation: sandbox"),
          message=("tool 'echo' asks for a sandbox, and none can be made on this machine",
                   "TOOLLOOP_BWRAP names", "a plan that uses it is refused"),
          hint=("apt-get install bubblewrap", "user namespaces", "required: false"))
    assert contract is not None  # a warning for the registry alone
    text = "version: 1\nregistry: reg.yml\nsubagent: w\nmode: sequential\ncalls:\n  - {tool: echo, args: {}}\n"
    found(rejected(write("plan.yml", text)), "TL423", file="plan.yml", at=pos(text, "echo"),
          message=("tool 'echo' needs a sandbox (isolation: sandbox), and none can be made on this machine",),
          hint=("apt-get install bubblewrap", "required: false"))


@covers("TL501", "TL502", "TL503", "TL504")
def test_a_suite_file_is_checked_whole_each_finding_in_its_place(tmp_path, monkeypatch):
    from toolloop_cli.suite.load import load_suite

    monkeypatch.chdir(tmp_path)
    demo = ROOT / "plans" / "routed-example.yml"
    (tmp_path / "batch.yml").write_text(f"version: 1\nregistry: {ROOT / 'registries' / 'demo.yml'}\n"
                                        "subagent: worker-a\nmode: sequential\ncalls: [{tool: lookup, args: {key: a}}]\n")
    text = textwrap.dedent(f"""
        version: 1
        kind: suite
        cases:
          - {{name: a, plan: nowhere.yml}}
          - {{name: b, plan: {demo}, expect: {{never: [lookpu]}}}}
          - {{name: c, plan: batch.yml, expect: {{route: publish}}}}
          - {{name: c, plan: batch.yml}}
    """).lstrip("\n")
    (tmp_path / "suite.yml").write_text(text)
    suite, problems = load_suite("suite.yml")
    assert suite is None
    found(problems, "TL501", file="suite.yml", at=pos(text, "nowhere.yml"), message=("plan nowhere.yml not found",))
    found(problems, "TL502", file="suite.yml", at=pos(text, "lookpu"),
          message=("tool 'lookpu' is not in the plan's registry (subagent 'worker-a')",), hint=("did you mean 'lookup'?",))
    found(problems, "TL503", file="suite.yml", at=pos(text, "route: publish"),
          message=("expectation 'route' needs a routed plan",))
    line, col = pos(text, "{name: c", 2)
    found(problems, "TL504", file="suite.yml", at=(line, col + len("{name: ")),
          message=("case name 'c' is used twice (first at cases[2])",))
@covers("TL430")
def test_taint_allow_with_an_untrusted_and_a_write_tool_is_a_warning(tmp_path):
    from toolloop_cli.lint.check import Checker, Flags
    from toolloop_cli.lint.discover import Target

    write("reg.yml", tool_registry(extra="output_trust: untrusted\n") + textwrap.indent(dedent("""
              send:
                callable: testapp.tools:marker
                description: Writes a file.
                effect: write  # toolloop: ignore[TL353]
                input_schema: {}
                output_schema: {}
    """), " " * 6))
    text = """
        version: 1
        registry: reg.yml
        subagent: w
        mode: routed
        goal: g
        router_profile: {provider: openai, model: m}
        final_profile: {provider: openai, model: m}
        budget: {max_iterations: 2, max_tokens: 100, max_tool_calls: 1, timeout_s: 5}
        taint: {on_write: allow}
    """
    write("plan.yml", text)
    report = Checker(Flags()).check([Target(Path("plan.yml"), "plan")])
    found(report.problems, "TL430", level="warning", file="plan.yml", at=_value_at(text, "on_write: allow"),
          message=("taint.on_write: allow", "'send'", "'echo'"), hint=("on_write: approve",))
