"""Registries and plans read without pydantic (contract/quick.py) read exactly as the declaration
models read them, and only what the models accept: every example file and thousands of variants
of them (each value swapped for one of another kind, each key dropped, an unknown key added) are
read both ways; where the plain rules accept a document, the models accept it too, to the same
fields, values, types, set fields and dump. A well-formed one-call plan and ``validate`` of a
well-formed registry then run without importing pydantic at all."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from toolloop_cli.contract import models as cm
from toolloop_cli.contract import quick
from toolloop_cli.contract.document import load_document
from toolloop_cli.plan import models as pm

ROOT = Path(__file__).resolve().parent.parent

PAIRS = [(quick.REGISTRY, cm.RegistryDecl), (quick.SUBAGENT, cm.SubagentDecl), (quick.TOOL, cm.ToolDecl),
         (quick.RUNNER_DEFAULTS, cm.RunnerDefaults), (quick.RETRY, cm.RetryDecl),
         (quick.CONCURRENCY, cm.ConcurrencyDecl), (quick.APPROVAL, cm.ApprovalDecl),
         (quick.CALL, pm.CallDecl), (quick.LANE, pm.LaneDecl), (quick.PLAN, pm.PlanDecl)]

RICH_REGISTRY = {
    "version": 1, "app_root": ".", "evidence": "app:evidence",
    "subagents": {
        "b": {
            "runner_defaults": {"allowed_tools": ["t", "u"], "max_calls": 3, "tool_timeout_s": 2, "max_depth": 0},
            "tools": {
                "t": {"callable": "app:t", "description": "d", "input_schema": {"type": "object", "properties": {
                    "a": {"type": "number", "minimum": 1.5}}}, "output_schema": True, "cacheable": True,
                    "timeout_s": 1.5, "retry": {"max_attempts": 3, "backoff_s": 1, "max_backoff_s": 2.5, "on": ["error"]},
                    "isolation": "process", "concurrency": {"max_in_flight": 2, "per_second": 10}, "max_calls": 0,
                    "effect": "write", "idempotent": True, "redact": ["a"], "approval": {"when": "args.a > 1"},
                    "dispatch": ["u"], "output_trust": "untrusted"},
                "u": {"plan": "child.yml", "approval": "required", "output_schema": {}, "input_schema": False},
            },
        },
        "c": {"tools": {}},
    },
}
RICH_PLANS = [
    {"version": 1, "registry": "r.yml", "subagent": "b", "mode": "sequential",
     "calls": [{"tool": "t", "call_key": "k", "args": {"a": [1, 2.5, None, True, {"b": "c"}]}}, {"tool": "u"}]},
    {"version": 1, "subagent": "b", "mode": "parallel", "max_concurrency": 4,
     "lanes": [{"item_key": "i", "payload": {"x": 1}, "calls": [{"tool": "t", "args": {}}]}]},
]
ODD = [None, True, False, 0, 1, -1, 2.5, float("inf"), "x", "required", "write", "error", [], {}, ["a"],
       {"a": 1}, {1: "a"}, {"when": "x"}]


def _examples() -> list[tuple[str, Any]]:
    docs: list[tuple[str, Any]] = [("rich registry", RICH_REGISTRY)] + [(f"rich plan {i}", p) for i, p in enumerate(RICH_PLANS)]
    for folder in ("registries", "plans", "bench", "tests"):
        for path in sorted((ROOT / folder).rglob("*.y*ml")):
            data = load_document(path).data
            if isinstance(data, dict):
                docs.append((str(path.relative_to(ROOT)), data))
    return docs


EXAMPLES = _examples()


def _kind(data: Any) -> tuple[quick.Model, type[BaseModel]] | None:
    if not isinstance(data, dict):
        return None
    return (quick.PLAN, pm.PlanDecl) if "mode" in data or "calls" in data or "lanes" in data else (quick.REGISTRY, cm.RegistryDecl)


def _same(plain: Any, model: Any, where: str) -> None:
    if isinstance(model, BaseModel):
        assert isinstance(plain, quick.Decl), where
        assert plain.model_fields_set == model.model_fields_set, where
        for name in type(model).model_fields:
            _same(getattr(plain, name), getattr(model, name), f"{where}.{name}")
    elif isinstance(model, dict):
        assert type(plain) is dict and list(plain) == list(model), where
        for k in model:
            _same(plain[k], model[k], f"{where}.{k}")
    elif isinstance(model, list):
        assert type(plain) is list and len(plain) == len(model), where
        for i, (p, m) in enumerate(zip(plain, model)):
            _same(p, m, f"{where}[{i}]")
    else:
        assert type(plain) is type(model) and plain == model, (where, plain, model)


def _check(rules: quick.Model, model: type[BaseModel], data: Any, where: str) -> bool:
    """The property: what the rules accept, the model accepts, to the same declaration."""
    plain = quick.read(rules, data)
    if plain is None:
        return False
    try:
        decl = model.model_validate(data)
    except ValidationError as exc:  # pragma: no cover - the failure this test exists for
        pytest.fail(f"{where}: the plain rules accepted what the model refuses: {exc}")
    _same(plain, decl, where)
    assert plain.model_dump(mode="json", exclude_unset=True) == decl.model_dump(mode="json", exclude_unset=True), where
    assert quick.dumped(plain) == quick.dumped(decl) == decl.model_dump(mode="json", exclude_unset=True), where
    return True


def _places(data: Any, at: tuple = ()) -> list[tuple]:
    out = [at]
    if isinstance(data, dict):
        for k, v in data.items():
            out += _places(v, at + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _places(v, at + (i,))
    return out


def _with(data: Any, at: tuple, value: Any, drop: bool = False) -> Any:
    out = copy.deepcopy(data)
    parent = out
    for part in at[:-1]:
        parent = parent[part]
    if drop:
        del parent[at[-1]]
    else:
        parent[at[-1]] = value
    return out


@pytest.mark.parametrize("rules,model", PAIRS, ids=[m.__name__ for _, m in PAIRS])
def test_the_rules_have_the_models_fields_and_defaults(rules, model):
    assert sorted(rules.names) == sorted(model.model_fields)
    for name, (_rule, default) in rules.fields.items():
        info = model.model_fields[name]
        if default is quick._REQUIRED:
            assert info.is_required(), name
            continue
        assert not info.is_required(), name
        mine = default() if callable(default) else default
        theirs = info.get_default(call_default_factory=True)
        if isinstance(theirs, BaseModel):
            _same(mine, theirs, name)
        else:
            assert type(mine) is type(theirs) and mine == theirs, name
    for name in rules.model_only:
        assert model.model_fields[name].get_default() is None, name


def test_every_example_is_read_plainly_as_the_models_read_it():
    plainly = [where for where, data in EXAMPLES if (k := _kind(data)) and _check(*k, data, where)]
    # the examples that have only the parts the rules cover are read without the models
    assert {"rich registry", "rich plan 0", "rich plan 1", "registries/demo.yml", "plans/sequential.yml",
            "plans/parallel.yml"} <= set(plainly)


def test_no_variant_is_read_plainly_otherwise_than_the_models_read_it():
    accepted = refused = 0
    for where, data in EXAMPLES:
        kind = _kind(data)
        if kind is None:
            continue
        places = _places(data)[1:]
        variants = [_with(data, ("unknown_key",), 1)]
        for variant in variants:
            assert not _check(*kind, variant, where)
        for at in places[:: max(1, len(places) // 60)]:  # up to about 60 places a document
            variants = [_with(data, at, odd) for odd in ODD] + [_with(data, at, None, drop=True)]
            here = data
            for part in at:
                here = here[part]
            if isinstance(here, dict):
                variants.append(_with(data, at + ("unknown_key",), 1))
            for variant in variants:
                if _check(*kind, variant, f"{where} at {at}"):
                    accepted += 1
                else:
                    refused += 1
    assert accepted > 500 and refused > 500  # both sides of the rules were exercised


def test_a_declaration_read_plainly_is_frozen_and_copies_as_the_model():
    plain = quick.read(quick.PLAN, RICH_PLANS[0])
    with pytest.raises(AttributeError):
        plain.mode = "parallel"
    copied = plain.model_copy(update={"context": {"a": 1}})
    model = pm.PlanDecl.model_validate(RICH_PLANS[0]).model_copy(update={"context": {"a": 1}})
    assert copied.model_dump(mode="json", exclude_unset=True) == model.model_dump(mode="json", exclude_unset=True)
    assert copied.model_fields_set == model.model_fields_set
    assert plain.context is None  # the original is left as it was
    with pytest.raises(TypeError):
        plain.model_dump()  # only the dump the hashes take is offered
    import pickle

    for again in (pickle.loads(pickle.dumps(plain)), copy.deepcopy(plain)):  # a contract sent to a worker
        assert again.model_dump(mode="json", exclude_unset=True) == plain.model_dump(mode="json", exclude_unset=True)
        assert again.calls[0].args == plain.calls[0].args and again.model_fields_set == plain.model_fields_set


def _run(tmp_path: Path, *args: str) -> tuple[int, bool, str]:
    probe = ("import sys, json\nsys.argv = ['toolloop', *json.loads(sys.argv[1])]\n"
             "from toolloop_cli.cli.app import main\n"
             "try:\n    main()\nfinally:\n"
             "    sys.stderr.write('\\n' + json.dumps('pydantic' in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe, json.dumps(args)], cwd=tmp_path, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    return done.returncode, json.loads(done.stderr.splitlines()[-1]), done.stdout


def _files(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("async def noop():\n    return {}\n")
    (tmp_path / "reg.yml").write_text(
        "version: 1\nsubagents:\n  b:\n    tools:\n      noop: {callable: 'app:noop', description: does nothing,"
        " timeout_s: 5, input_schema: {}, output_schema: {}}\n")
    (tmp_path / "one.yml").write_text(
        "version: 1\nregistry: reg.yml\nsubagent: b\nmode: sequential\ncalls:\n  - {tool: noop, args: {}}\n")


def test_a_one_call_plan_and_validate_run_without_pydantic(tmp_path):
    _files(tmp_path)
    code, imported, out = _run(tmp_path, "run", "one.yml", "--format", "jsonl", "--state-dir", str(tmp_path / "s"))
    assert (code, imported) == (0, False), out
    assert [json.loads(line)["status"] for line in out.splitlines()] == ["ok", "ok"]
    code, imported, out = _run(tmp_path, "validate", "reg.yml", "one.yml")
    assert (code, imported) == (0, False), out


def test_a_mistake_is_still_found_by_the_models(tmp_path):
    _files(tmp_path)
    (tmp_path / "one.yml").write_text(
        "version: 1\nregistry: reg.yml\nsubagent: b\nmode: sequential\ncalls:\n  - {tool: noop, arsg: {}}\n")
    code, imported, out = _run(tmp_path, "validate", "reg.yml", "one.yml", "--format", "json")
    assert code != 0 and imported is True
    found = json.loads(out)
    assert [(f["code"], f["line"], f["col"], f["message"]) for f in found] == [
        ("TL201", 6, 18, "unknown key 'arsg'")]


def test_a_whole_number_past_any_float_is_left_to_the_models():
    """A number field holding a whole number too large for a float (as a fuzzed registry wrote)
    is not read plainly: the models then say what is wrong, where ``float()`` raised before."""
    huge = 10 ** 400
    assert quick.read(quick.RUNNER_DEFAULTS, {"tool_timeout_s": huge}) is None
    with pytest.raises(ValidationError):
        cm.RunnerDefaults.model_validate({"tool_timeout_s": huge})
