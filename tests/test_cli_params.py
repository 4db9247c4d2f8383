"""Command-line values are converted without typer's pydantic adapters where the value is plain,
to exactly what typer's own conversion makes of them; any other value is refused with typer's
own message."""

from __future__ import annotations

import enum
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import typer.main
from typer._click import Context
from typer._click.exceptions import BadParameter
from typer._coercion import build_runtime_param

from toolloop_cli.cli import _params
from toolloop_cli.cli.app import app

PLAIN = [None, "", "abc", "0", "7", "-3", "007", "1.5", "-0.25", "1e3", " 5", "5 ", "65535", "65536", "-1",
         "99999999999999999999999", "json", "JSON", "jsonl", "table", "text", "sarif", "all", "none", "ask",
         "a/b", "-", "~", ".", True, False, 3, 2.5, Path("x.yml")]


def _parameters():
    root = typer.main.get_command(app)
    todo = [(root, "toolloop")]
    while todo:
        cmd, name = todo.pop()
        for p in cmd.params:
            yield f"{name} {p.name}", cmd, p
        for sub_name, sub in getattr(cmd, "commands", {}).items():
            todo.append((sub, f"{name} {sub_name}"))


PARAMS = sorted(_parameters(), key=lambda x: x[0])


def _outcome(conv, value, param, ctx):
    try:
        got = conv.coerce(value, param=param, ctx=ctx)
    except BadParameter as exc:
        return ("refused", exc.format_message())
    return ("value", type(got), got)


def _samples(param):
    values = list(PLAIN) + [param.default]
    for choice in param.type_descriptor.choices or ():
        values += [choice, getattr(choice, "value", choice), str(getattr(choice, "value", choice)).upper()]
    if param.multiple or param.nargs == -1:
        values += [tuple(v for v in values if isinstance(v, str)), ("a", "b"), (), ("x", 3)]
    return values


@pytest.mark.parametrize("where,cmd,param", PARAMS, ids=[p[0] for p in PARAMS])
def test_every_parameter_converts_as_typer_does(where, cmd, param):
    plain = _params.plain_param(param.type_descriptor)
    assert plain is not None  # see the next test
    own = build_runtime_param(param.type_descriptor)
    ctx = Context(cmd)
    for value in _samples(param):
        expected = _outcome(own, value, param, ctx)
        if expected[0] == "refused" and isinstance(value, str) and param.type_descriptor.choices:
            # a word that is not a choice: typer's words without pydantic's prefix (see the next tests)
            assert "Value error, " in expected[1], expected
            expected = ("refused", expected[1].replace("Value error, ", "", 1))
        assert _outcome(plain, value, param, ctx) == expected, (where, value)


def test_most_parameters_have_the_plain_conversion():
    """Every parameter toolloop declares today: if one is added of a kind the plain conversion
    does not know, this says so (it would bring pydantic back into every command that has it)."""
    assert [w for w, _, p in PARAMS if _params.plain_param(p.type_descriptor) is None] == []


class Colour(enum.Enum):
    red = "red"
    blue = "blue"


def test_numbers_out_of_bounds_words_and_case_go_to_typer():
    info = typer.models.OptionInfo(min=1, max=10)
    desc = typer._coercion.resolve_type_descriptor(int, info)
    conv = _params.plain_param(desc)

    class P:
        multiple, nargs = False, 1

    assert conv.coerce("4", P, None) == 4
    assert conv._full is None  # decided without typer's adapter
    with pytest.raises(BadParameter):
        conv.coerce("11", P, None)
    assert conv._full is not None
    choice = _params.plain_param(typer._coercion.resolve_type_descriptor(Colour, typer.models.OptionInfo(case_sensitive=False)))
    assert choice.coerce("RED", P, None) is Colour.red


def test_a_command_does_not_import_typers_adapters(tmp_path):
    """``toolloop validate`` in a fresh interpreter: typer's pydantic adapters are never built."""
    (tmp_path / "app.py").write_text("def noop():\n    return {}\n")
    (tmp_path / "reg.yml").write_text(
        "version: 1\nsubagents:\n  b:\n    tools:\n      noop: {callable: app:noop, description: does nothing, timeout_s: 5, input_schema: {}, output_schema: {}}\n")
    probe = ("import sys, json\nsys.argv = ['toolloop', 'validate', 'reg.yml', '--format', 'json']\n"
             "from toolloop_cli.cli.app import main\n"
             "try:\n    main()\nfinally:\n"
             "    sys.stderr.write(json.dumps('typer._adapters' in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stderr.splitlines()[-1]) is False


def test_a_wrong_value_is_refused_with_typers_message():
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["run", "plan.yml", "--max-concurrency", "many"])
    assert result.exit_code == 2
    assert "Invalid value for '--max-concurrency' / '-j'" in result.output, result.output


def test_a_word_that_is_not_a_choice_says_what_was_given_and_what_is_allowed(tmp_path):
    """Refused as the parser refuses any wrong value (usage, the option, exit code 2), without
    pydantic's "Value error, " before it."""
    for args, said in [
        (["run", "plan.yml", "--format", "xml"], "'xml' is not one of 'auto', 'table', 'jsonl', 'json'."),
        (["run", "plan.yml", "-f", "JSON"], "'JSON' is not one of 'auto', 'table', 'jsonl', 'json'."),
        (["validate", "reg.yml", "--format", "xml"], "'xml' is not one of 'text', 'json', 'github', 'sarif'."),
        (["run", "plan.yml", "--approve", "maybe"], "'maybe' is not one of 'ask', 'all', 'none'."),
    ]:
        done = subprocess.run([sys.executable, "-m", "toolloop_cli", *args], cwd=tmp_path, capture_output=True,
                              text=True, env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})
        assert done.returncode == 2 and done.stdout == "", (args, done.stdout)
        option = "'--format' / '-f'" if "--approve" not in args else "'--approve'"
        assert done.stderr.splitlines()[-1] == f"Error: Invalid value for {option}: {said}", done.stderr
        assert done.stderr.startswith(f"Usage: python -m toolloop_cli {args[0]} [OPTIONS]")
