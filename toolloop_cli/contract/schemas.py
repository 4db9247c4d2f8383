"""JSON Schema checks (meta-validation, local-only $ref) and compiled validators.

Schemas are checked and compiled with an empty reference registry: a ``$ref`` resolves only
inside the same document and nothing is ever fetched from the network or the file system.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, Iterator

from .._text import clip_quoting, excerpt, quoted
from .source import Path

REDACTED = "[REDACTED]"
_SECRET_WORDS = ("token", "secret", "password", "api_key", "apikey")


def iter_refs(schema: Any, path: Path = ()) -> Iterator[tuple[Path, str]]:
    """Every ``$ref`` / ``$dynamicRef`` value in ``schema`` with its path."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                yield path + (key,), value
            elif key not in ("const", "enum", "examples", "default"):
                yield from iter_refs(value, path + (key,))
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            yield from iter_refs(value, path + (i,))


def _anchors(schema: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("$anchor", "$dynamicAnchor") and isinstance(value, str):
                found.add(value)
            elif key not in ("const", "enum", "examples", "default"):
                found |= _anchors(value)
    elif isinstance(schema, list):
        for value in schema:
            found |= _anchors(value)
    return found


def resolve_pointer(doc: Any, pointer: str) -> tuple[bool, Any]:
    """Follow an RFC 6901 pointer; returns (found, value)."""
    if pointer == "":
        return True, doc
    if not pointer.startswith("/"):
        return False, None
    current = doc
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            return False, None
    return True, current


def check_refs(schema: Any) -> list[tuple[Path, str, str]]:
    """Problems with ``$ref``: (path, code, message). TL321 outside, TL322 unresolvable."""
    out = []
    anchors = None
    for path, ref in iter_refs(schema):
        if not ref.startswith("#"):
            out.append((path, "TL321", f"$ref {quoted(ref)} points outside this document; only '#...' references are allowed"))
            continue
        fragment = ref[1:]
        from urllib.parse import unquote

        fragment = unquote(fragment)
        if fragment == "" or fragment.startswith("/"):
            ok, _ = resolve_pointer(schema, fragment)
        else:
            anchors = _anchors(schema) if anchors is None else anchors
            ok = fragment in anchors
        if not ok:
            out.append((path, "TL322", f"$ref {quoted(ref)} does not resolve inside this document"))
    return out


_TYPE_NAMES = ("array", "boolean", "integer", "null", "number", "object", "string")


def meta_errors(schema: Any) -> list[tuple[Path, str, str]]:
    """Meta-validation errors of ``schema`` (draft from ``$schema``, default 2020-12) as
    (path, message, hint), one per place and message; the hint names a close type name when
    one exists."""
    if isinstance(schema, bool):
        return []
    if _meta_valid_fast(schema):  # the common case, without importing the Python validator
        return [(path, message, "write a regular expression in the ECMA 262 dialect that JSON Schema uses")
                for path, message in _pattern_errors(schema)]
    import jsonschema
    from jsonschema.exceptions import best_match
    from jsonschema.validators import validator_for

    from .problems import did_you_mean

    # a '$schema' that is not text names no draft: the default draft's meta-schema reports it
    named = schema if isinstance(schema, dict) and isinstance(schema.get("$schema", ""), str) else {}
    cls = validator_for(named, default=jsonschema.Draft202012Validator)
    meta = cls(cls.META_SCHEMA)
    out: list[tuple[Path, str, str]] = []
    seen: set[tuple[Path, str]] = set()
    try:
        errors = list(meta.iter_errors(schema))
    except RecursionError:
        return [((), "the schema nests too deeply to be checked", "flatten it, e.g. with $defs and $ref")]
    for err in errors:
        path = tuple(err.absolute_path)
        best = best_match(err.context) if err.context else err
        message = clip_quoting(best.message, _py_text(best.instance), _py_text(err.instance))
        hint = ""
        if path and path[-1] == "type" and isinstance(err.instance, str):
            near = did_you_mean(err.instance, _TYPE_NAMES)
            if near:
                hint = f"did you mean {quoted(near)}?"
        if (path, message) in seen:
            continue  # the meta-schema reaches some keywords along several dynamic paths
        seen.add((path, message))
        out.append((path, message, hint))
    if not out:
        out.extend((path, message, "write a regular expression in the ECMA 262 dialect that JSON Schema uses")
                   for path, message in _pattern_errors(schema))
    return out


#: drafts whose meta-schemas jsonschema-rs checks as the Python validator does
_FAST_DRAFTS = frozenset({
    "https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema#", "http://json-schema.org/draft-06/schema#",
    "http://json-schema.org/draft-04/schema#",
})


def _meta_valid_fast(schema: Any) -> bool:
    """True when jsonschema-rs finds ``schema`` valid against its draft's meta-schema (no
    ``$schema``: 2020-12, as below). Anything else (an error, another draft, a failure to
    check) is left to the Python validator, whose messages the findings quote."""
    if not isinstance(schema, dict):
        return False
    draft = schema.get("$schema", "https://json-schema.org/draft/2020-12/schema")
    if not isinstance(draft, str) or draft not in _FAST_DRAFTS:
        return False
    import jsonschema_rs

    try:
        return bool(jsonschema_rs.meta.is_valid(schema))
    except Exception:  # noqa: BLE001 - a schema it cannot check is checked the slow way
        return False


def _py_text(value: Any) -> str:
    """``repr(value)`` as the Python validator writes it into messages ('' when it cannot)."""
    try:
        return repr(value)
    except RecursionError:
        return ""


def _pattern_errors(schema: Any, path: Path = ()) -> Iterator[tuple[Path, str]]:
    """Regular expressions the validator (jsonschema-rs, ECMA 262 dialect) cannot compile, each
    at its own place rather than as one failure of the whole schema."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("const", "enum", "examples", "default"):
                continue
            if key == "pattern" and isinstance(value, str):
                problem = _regex_problem(value)
                if problem:
                    yield path + (key,), f"pattern {quoted(value)} is not a valid regular expression: {problem}"
            elif key == "patternProperties" and isinstance(value, dict):
                for regex, sub in value.items():
                    problem = _regex_problem(regex)
                    if problem:
                        yield path + (key, regex), f"patternProperties key {quoted(regex)} is not a valid regular expression: {problem}"
                    yield from _pattern_errors(sub, path + (key, regex))
            else:
                yield from _pattern_errors(value, path + (key,))
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            yield from _pattern_errors(value, path + (i,))


def _regex_problem(regex: str) -> str | None:
    import jsonschema_rs

    try:
        jsonschema_rs.validator_for({"pattern": regex})
    except Exception as exc:  # noqa: BLE001 - the validator library's own errors
        return clip_quoting(str(exc).splitlines()[0], regex) if str(exc) else type(exc).__name__
    return None


#: keywords that never make a value invalid (annotations): a schema of only these (and ``type:
#: object`` and a permissive ``additionalProperties``) is checked without the compiled validator
_ANNOTATIONS = frozenset({"title", "description", "$comment", "examples", "default", "deprecated",
                          "readOnly", "writeOnly"})


def _trivial(schema: Any) -> str | None:
    """``"any"`` for a schema every value passes (``true``, ``{}``), ``"object"`` for exactly
    ``{type: object}`` (or with ``additionalProperties: true``), ``"empty"`` for ``{type: object,
    additionalProperties: false}`` with no properties; None for any other schema. Annotation
    keywords may stand beside them."""
    if schema is True:
        return "any"
    if type(schema) is not dict or not all(k in _ANNOTATIONS for k in schema.keys() - {"type", "additionalProperties"}):
        return None
    extra = schema.get("additionalProperties", True)
    if extra is not True and extra is not False:
        return None
    if "type" not in schema:
        return "any" if extra is True else None
    if schema["type"] != "object":
        return None
    return "object" if extra is True else "empty"


def compile_validator(schema: Any, mask: bool) -> Any:
    """A fast validator (jsonschema-rs) that never retrieves anything, bounded as below; None for
    a schema every value passes (nothing to call), and for a bare object schema one that answers
    ``is_valid`` of a dict with a type test (``ObjectValidator``). Every value a validator is asked
    about has passed as JSON already (arguments parsed from JSON, copied through it or bounded by
    ``value_problem``, results serialised by the output gate first), which is all the compiled
    validator would refuse beyond the schema."""
    import jsonschema_rs

    trivial = _trivial(schema)
    if trivial == "any":
        return None
    kwargs: dict[str, Any] = {"offline": True}
    if mask:
        kwargs["mask"] = REDACTED
    inner = jsonschema_rs.validator_for(schema, **kwargs)
    if trivial is not None:
        return ObjectValidator(inner, empty=trivial == "empty")
    return BoundedValidator(inner)


class InstanceProblem:
    """An error about the whole instance, shaped as jsonschema-rs's errors are."""

    __slots__ = ("message",)
    instance_path: tuple = ()
    instance = None

    def __init__(self, message: str):
        self.message = message


class BoundedValidator:
    """A compiled validator that answers for every value, wherever it came from (a model, an
    App's ``dispatch()``, an approver's edit, a tool's result): jsonschema-rs cannot read text with
    a lone surrogate and stops with an error past 255 levels of nesting. Such a value is not
    valid, and its one error says why (``value_problem``: the bound every call's arguments have),
    instead of an exception no caller expects. Valid values cost nothing extra."""

    __slots__ = ("_inner",)

    def __init__(self, inner: Any):
        self._inner = inner

    def is_valid(self, instance: Any) -> bool:
        try:
            return bool(self._inner.is_valid(instance))
        except ValueError:  # UnicodeEncodeError (a lone surrogate) included
            return False

    def iter_errors(self, instance: Any) -> Iterator[Any]:
        from .._json import value_problem

        why = value_problem(instance)
        if why is not None:
            yield InstanceProblem(f"the value cannot be checked: {why}")
            return
        try:
            yield from self._inner.iter_errors(instance)
        except ValueError as exc:  # not JSON at all: a key that is not text, an object of a class
            yield InstanceProblem(f"the value cannot be checked: it is not JSON ({clip_quoting(str(exc), '')})")


class ObjectValidator(BoundedValidator):
    """A bare object schema's validator: valid is a dict (``empty``: with no key), decided by a
    type test; the compiled validator gives the errors of a value that is not, word for word."""

    __slots__ = ("_empty",)

    def __init__(self, inner: Any, *, empty: bool):
        super().__init__(inner)
        self._empty = empty

    def is_valid(self, instance: Any) -> bool:
        if type(instance) is dict:
            return not (self._empty and instance)
        return super().is_valid(instance)  # not a plain dict: the compiled validator says


def schema_errors(validator: Any, instance: Any, limit: int = 10) -> list[str]:
    """Up to ``limit`` messages, each prefixed with the instance path; the values they quote
    are cut to excerpts."""
    from .._json import dumps

    out = []
    for err in validator.iter_errors(instance):
        where = excerpt("/" + "/".join(str(p) for p in err.instance_path))
        try:
            shown = dumps(err.instance).decode()
        except TypeError:
            shown = ""
        message = clip_quoting(err.message, shown)
        out.append(f"at {where}: {message}" if err.instance_path else message)
        if len(out) >= limit:
            break
    return out


def is_json_pointer(text: str) -> bool:
    """RFC 6901: empty, or '/'-separated tokens where '~' is only ever '~0' or '~1'."""
    return text == "" or (text.startswith("/") and re.fullmatch(r"(/([^~/]|~[01])*)*", text) is not None)


def pointer_tokens(pointer: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")] if pointer else []


def pointer_can_match(schema: Any, pointer: str) -> bool:
    """Could a value at ``pointer`` exist in an instance of ``schema``? Open schemas say yes.

    The token ``*`` stands for any key or array index, as in ``redact``. When in doubt (a
    pattern that does not compile, a reference to an anchor, deep recursion) the answer is yes,
    so that a warning is only ever given for a pointer that truly cannot match.
    """
    if schema is None:
        return True
    return _can_match(schema, pointer_tokens(pointer), schema, 0)


_MAX_DEPTH = 64


def _local_target(root: Any, ref: str) -> tuple[bool, Any]:
    from urllib.parse import unquote

    fragment = unquote(ref[1:])
    if fragment == "" or fragment.startswith("/"):
        return resolve_pointer(root, fragment)
    return False, None


def _can_match(schema: Any, tokens: list[str], root: Any, depth: int) -> bool:
    if schema is False:
        return False
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return True
    if not tokens:
        return True
    if not _applicators_allow(schema, tokens, root, depth):
        return False
    head, rest = tokens[0], tokens[1:]
    types = _types(schema.get("type"))
    if "object" in types and _key_can_match(schema, head, rest, root, depth):
        return True
    if "array" in types and _index_can_match(schema, head, rest, root, depth):
        return True
    return False


def _applicators_allow(schema: dict, tokens: list[str], root: Any, depth: int) -> bool:
    """Every applicator that is present constrains the same instance: $ref and allOf must all
    allow the value, anyOf and oneOf need at least one branch that does."""
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        ok, target = _local_target(root, ref)
        if ok and not _can_match(target, tokens, root, depth + 1):
            return False
    if not all(_can_match(sub, tokens, root, depth + 1) for sub in _list(schema.get("allOf"))):
        return False
    for comb in ("anyOf", "oneOf"):
        subs = _list(schema.get(comb))
        if subs and not any(_can_match(sub, tokens, root, depth + 1) for sub in subs):
            return False
    return True


def _types(t: Any) -> set[str]:
    """The instance types a ``type`` keyword allows among those a pointer can step into."""
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return {x for x in t if isinstance(x, str)}
    return {"object", "array"}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _key_can_match(schema: dict, head: str, rest: list[str], root: Any, depth: int) -> bool:
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    patterns = schema.get("patternProperties") if isinstance(schema.get("patternProperties"), dict) else {}
    additional = schema.get("additionalProperties", True)
    if head == "*":
        candidates = list(props.values()) + list(patterns.values()) + [additional]
        return any(_can_match(c, rest, root, depth + 1) for c in candidates)
    if head in props:
        return _can_match(props[head], rest, root, depth + 1)
    matched = False
    for pattern, sub in patterns.items():
        hit = _key_matches(pattern, head)
        if hit is None:
            return True
        if hit:
            matched = True
            if _can_match(sub, rest, root, depth + 1):
                return True
    if matched:
        return False
    return _can_match(additional, rest, root, depth + 1)


@functools.lru_cache(maxsize=256)
def _key_matcher(pattern: str) -> Any:
    import jsonschema_rs

    return jsonschema_rs.validator_for({"pattern": pattern})


def _key_matches(pattern: Any, key: str) -> bool | None:
    """Does a ``patternProperties`` pattern match ``key``, as the schema validator matches it (its
    ECMA 262 dialect, in time linear in the key or bounded in backtracking: never Python's ``re``,
    which backtracks exponentially on patterns such as ``^(a+)+$``)? None when it cannot tell."""
    if not isinstance(pattern, str):
        return None
    try:
        return bool(_key_matcher(pattern).is_valid(key))
    except Exception:  # noqa: BLE001 - a pattern the validator cannot compile: in doubt
        return None


def _index_can_match(schema: dict, head: str, rest: list[str], root: Any, depth: int) -> bool:
    if head != "*" and not head.isdigit():
        return False
    prefix = _list(schema.get("prefixItems"))
    items = schema.get("items", True)
    if head == "*":
        return any(_can_match(c, rest, root, depth + 1) for c in prefix + [items])
    i = int(head)
    return _can_match(prefix[i] if i < len(prefix) else items, rest, root, depth + 1)


def iter_properties_at(schema: Any, pointer: str = "", spath: Path = ()) -> Iterator[tuple[str, str, dict, Path]]:
    """(name, JSON pointer, sub-schema, path of the property inside the schema) for every
    declared property, nested included."""
    if not isinstance(schema, dict):
        return
    props = schema.get("properties")
    for name, sub in (props if isinstance(props, dict) else {}).items():
        ptr = f"{pointer}/{name.replace('~', '~0').replace('/', '~1')}"
        if isinstance(sub, dict):
            here = spath + ("properties", name)
            yield name, ptr, sub, here
            yield from iter_properties_at(sub, ptr, here)
    items = schema.get("items")
    if isinstance(items, dict):
        # '*' stands for every element of the array (redaction treats it as a wildcard)
        yield from iter_properties_at(items, pointer + "/*", spath + ("items",))
    for comb in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(_list(schema.get(comb))):
            yield from iter_properties_at(sub, pointer, spath + (comb, i))


def iter_properties(schema: Any, pointer: str = "") -> Iterator[tuple[str, str, dict]]:
    """(name, JSON pointer, sub-schema) for every declared property, nested included."""
    for name, ptr, sub, _ in iter_properties_at(schema, pointer):
        yield name, ptr, sub


def pointer_covers(redact_pointer: str, pointer: str) -> bool:
    """Does redacting ``redact_pointer`` hide the value at ``pointer`` (``*`` matches any token)?"""
    outer, inner = pointer_tokens(redact_pointer), pointer_tokens(pointer)
    if len(outer) > len(inner):
        return False
    return all(o == "*" or o == i for o, i in zip(outer, inner))


def looks_secret(name: str) -> bool:
    low = name.lower().replace("-", "_")
    return any(word in low for word in _SECRET_WORDS)


def write_only_pointers(schema: Any) -> list[str]:
    """Pointers of properties marked ``writeOnly: true`` (they are redacted like ``redact``)."""
    return [ptr for _, ptr, sub in iter_properties(schema) if sub.get("writeOnly") is True]


ValidatorFn = Callable[[Any], bool]
