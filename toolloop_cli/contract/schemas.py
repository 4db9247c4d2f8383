"""JSON Schema checks (meta-validation, local-only $ref) and compiled validators.

Schemas are checked and compiled with an empty reference registry: a ``$ref`` resolves only
inside the same document and nothing is ever fetched from the network or the file system.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

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
            out.append((path, "TL321", f"$ref '{ref}' points outside this document; only '#...' references are allowed"))
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
            out.append((path, "TL322", f"$ref '{ref}' does not resolve inside this document"))
    return out


def meta_errors(schema: Any) -> list[tuple[Path, str]]:
    """Meta-validation errors of ``schema`` (draft from ``$schema``, default 2020-12)."""
    import jsonschema
    from jsonschema.validators import validator_for

    if isinstance(schema, bool):
        return []
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    meta = cls(cls.META_SCHEMA)
    out = []
    for err in meta.iter_errors(schema):
        out.append((tuple(err.absolute_path), err.message))
    return out


def compile_validator(schema: Any, mask: bool) -> Any:
    """A fast validator (jsonschema-rs) that never retrieves anything."""
    import jsonschema_rs

    kwargs: dict[str, Any] = {"offline": True}
    if mask:
        kwargs["mask"] = REDACTED
    return jsonschema_rs.validator_for(schema, **kwargs)


def schema_errors(validator: Any, instance: Any, limit: int = 10) -> list[str]:
    """Up to ``limit`` messages, each prefixed with the instance path."""
    out = []
    for err in validator.iter_errors(instance):
        where = "/" + "/".join(str(p) for p in err.instance_path)
        out.append(f"at {where}: {err.message}" if err.instance_path else err.message)
        if len(out) >= limit:
            break
    return out


def pointer_can_match(schema: Any, pointer: str) -> bool:
    """Could a value at ``pointer`` exist in an instance of ``schema``? Open schemas say yes."""
    if schema is True or schema == {} or schema is None:
        return True
    if schema is False:
        return False
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")] if pointer else []
    return _can_match(schema, tokens, schema)


def _can_match(schema: Any, tokens: list[str], root: Any) -> bool:
    if not tokens:
        return True
    if schema is True or not isinstance(schema, dict):
        return schema is not False
    if "$ref" in schema and isinstance(schema["$ref"], str) and schema["$ref"].startswith("#/"):
        ok, target = resolve_pointer(root, schema["$ref"][1:])
        if ok and _can_match(target, tokens, root):
            return True
    for comb in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(comb, []) or []:
            if _can_match(sub, tokens, root):
                return True
    head, rest = tokens[0], tokens[1:]
    props = schema.get("properties") or {}
    if head in props:
        return _can_match(props[head], rest, root)
    for pattern, sub in (schema.get("patternProperties") or {}).items():
        import re

        try:
            if re.search(pattern, head) and _can_match(sub, rest, root):
                return True
        except re.error:
            return True
    items = schema.get("items")
    if (head.isdigit() or head == "*") and items is not None:
        return _can_match(items, rest, root)
    if head.isdigit() and schema.get("prefixItems"):
        return True
    additional = schema.get("additionalProperties", True)
    if additional is False:
        return False
    if isinstance(additional, dict):
        return _can_match(additional, rest, root)
    # open object: anything might be there, unless the schema pins a non-container type
    t = schema.get("type")
    if t is not None:
        types = {t} if isinstance(t, str) else set(t)
        return bool(types & {"object", "array"})
    return True


def iter_properties(schema: Any, pointer: str = "") -> Iterator[tuple[str, str, dict]]:
    """(name, JSON pointer, sub-schema) for every declared property, nested included."""
    if not isinstance(schema, dict):
        return
    for name, sub in (schema.get("properties") or {}).items():
        ptr = f"{pointer}/{name.replace('~', '~0').replace('/', '~1')}"
        if isinstance(sub, dict):
            yield name, ptr, sub
            yield from iter_properties(sub, ptr)
    items = schema.get("items")
    if isinstance(items, dict):
        # '*' stands for every element of the array (redaction treats it as a wildcard)
        yield from iter_properties(items, pointer + "/*")
    for comb in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(comb, []) or []:
            yield from iter_properties(sub, pointer)


def looks_secret(name: str) -> bool:
    low = name.lower().replace("-", "_")
    return any(word in low for word in _SECRET_WORDS)


def write_only_pointers(schema: Any) -> list[str]:
    """Pointers of properties marked ``writeOnly: true`` (they are redacted like ``redact``)."""
    return [ptr for _, ptr, sub in iter_properties(schema) if sub.get("writeOnly") is True]


ValidatorFn = Callable[[Any], bool]
