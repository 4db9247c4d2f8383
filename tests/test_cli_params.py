"""Command-line values are converted without typer's pydantic adapters where the value is plain,
to exactly what typer's own conversion makes of them; any other value is taken or refused as
typer's own conversion takes or refuses it, and a refusal is said in the parser's words, never
pydantic's."""

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
        got = _outcome(plain, value, param, ctx)
        if expected[0] == "refused" and isinstance(value, str) and _is_number(param):
            # refused where typer refuses, in the parser's words (exact words: the tests below)
            where_said = expected[1].split(": ", 1)[0] + ": "
            assert got[0] == "refused" and got[1].startswith(where_said), (where, value, got)
            assert "Input should" not in got[1] and (" is not a valid " in got[1] or " is not in the range " in got[1])
            continue
        assert got == expected, (where, value)


def _is_number(param):
    return param.type_descriptor.annotation in (int, float)


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


@pytest.mark.parametrize("args,said", [
    (["run", "plan.yml", "-j", "many"], "Invalid value for '--max-concurrency' / '-j': 'many' is not a valid integer."),
    (["run", "plan.yml", "--max-concurrency", "1.5"],
     "Invalid value for '--max-concurrency' / '-j': '1.5' is not a valid integer."),
    (["validate", "reg.yml", "-j", ""], "Invalid value for '--max-concurrency' / '-j': '' is not a valid integer."),
    (["run", "plan.yml", "--max-output-bytes", "1e3"], "Invalid value for '--max-output-bytes': '1e3' is not a valid integer."),
    (["run", "plan.yml", "--timeout", "soon"], "Invalid value for '--timeout': 'soon' is not a valid number of seconds."),
    (["call", "reg.yml", "t", "--timeout", "1,5"],
     "Invalid value for '--timeout': '1,5' is not a valid number of seconds."),
    (["validate", "reg.yml", "--timeout", "10s"],
     "Invalid value for '--timeout': '10s' is not a valid number of seconds."),
    (["mcp", "serve", "reg.yml", "--timeout", "later"],
     "Invalid value for '--timeout': 'later' is not a valid number of seconds."),
    (["serve", "--port", "70000"], "Invalid value for '--port': 70000 is not in the range 0<=x<=65535."),
    (["serve", "--port", "http"], "Invalid value for '--port': 'http' is not a valid integer."),
    (["mcp", "serve", "reg.yml", "--max-calls", "-1"], "Invalid value for '--max-calls': -1 is not in the range x>=0."),
    (["replay", "r1", "--from", "0"], "Invalid value for '--from': 0 is not in the range x>=1."),
    (["test", "suite.yml", "--repeat", "twice"], "Invalid value for '--repeat': 'twice' is not a valid integer."),
    (["runs", "prune", "--keep", "all"], "Invalid value for '--keep': 'all' is not a valid integer."),
])
def test_a_wrong_number_is_refused_in_the_parsers_words(tmp_path, args, said):
    """As click refuses a number (what was given, what a number is), usage and exit code 2; never
    pydantic's "Input should be a valid integer, unable to parse string as an integer"."""
    done = subprocess.run([sys.executable, "-m", "toolloop_cli", *args], cwd=tmp_path, capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})
    assert done.returncode == 2 and done.stdout == "", (args, done.stdout, done.stderr)
    assert done.stderr.splitlines()[-1] == f"Error: {said}", done.stderr
    command = " ".join(args[:2] if args[0] in ("mcp", "runs") else args[:1])
    assert done.stderr.startswith(f"Usage: python -m toolloop_cli {command} [OPTIONS]"), done.stderr


def test_a_number_typer_takes_is_still_taken():
    """Refusals change their words only: what typer's conversion takes past the plain one (spaces,
    a leading zero or plus, underscores, a whole number written 1.0) is taken as before."""
    run = typer.main.get_command(app).commands["run"]
    param = next(p for p in run.params if p.name == "max_concurrency")
    plain = _params.plain_param(param.type_descriptor)
    ctx = Context(run)
    assert [plain.coerce(v, param, ctx) for v in [" 5", "007", "+3", "1_000", "1.0"]] == [5, 7, 3, 1000, 1]


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


def test_every_fractional_number_option_counts_seconds_and_a_wrong_one_says_so():
    """A person reads what an option counts, not the type it is parsed as: each option that takes
    a fraction is a number of seconds (``SECONDS``), and what it refuses says so."""
    floats = [(name, cmd, p) for name, cmd, p in PARAMS if p.type_descriptor.annotation is float]
    assert {name.rsplit(" ", 1)[-1] for name, _, _ in floats} == {"timeout"} and len(floats) >= 4
    for name, cmd, p in floats:
        assert p.metavar == "SECONDS", name
        plain = _params.plain_param(p.type_descriptor)
        with pytest.raises(BadParameter) as refused:
            plain.coerce("soon", p, Context(cmd))
        assert refused.value.format_message() == "Invalid value for '--timeout': 'soon' is not a valid number of seconds.", name


def test_a_fraction_that_counts_no_seconds_is_refused_as_a_number():
    """The wording a number option that does not count seconds would get: a number, never "float"."""
    from types import SimpleNamespace

    explain = _params._number_refusal(float, SimpleNamespace(min=None, max=None, metavar="RATIO"))
    assert explain("half") == "'half' is not a valid number."
    assert _params._number_refusal(int, SimpleNamespace(min=None, max=None, metavar="N"))("two") == \
        "'two' is not a valid integer."
