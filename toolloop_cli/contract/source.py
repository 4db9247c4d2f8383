"""Explicit YAML loading with a source map kept beside the data.

Only the safe YAML subset is accepted: standard tags, no language objects. Duplicate keys are
reported at their second occurrence; anchors and aliases are allowed but the expanded size is
bounded before anything is built, so an alias bomb is refused at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Union

import yaml

from .._text import clip, quoted

Path = tuple[Union[str, int], ...]

#: How many nodes aliases may add to a document once expanded. A plan that reuses one ``args``
#: mapping in a few thousand lanes stays far below; a "billion laughs" document passes it at once
#: and is refused before anything is built.
MAX_ALIAS_GROWTH = 250_000

#: How deeply mappings and lists may nest. Far beyond any registry or plan, and low enough that
#: every later check can walk the data without running out of stack.
MAX_DEPTH = 100

_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeLoader):  # type: ignore[misc,valid-type]
    """The safe loader, reading numbers as YAML 1.2 (and JSON) do: YAML 1.1's float pattern needs
    a dot and a signed exponent, so ``3e1``, ``1e-5``, ``1.5e3`` and ``-.5`` would be text."""


#: YAML 1.2's core-schema floats (a dot, an exponent or both); YAML 1.1's forms stay as they were
_FLOAT_12 = re.compile(r"^[-+]?(?:\.[0-9]+(?:[eE][-+]?[0-9]+)?|[0-9]+\.[0-9]*(?:[eE][-+]?[0-9]+)?"
                       r"|[0-9]+[eE][-+]?[0-9]+)$")
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))
_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"
_SCALAR_TAGS = {
    _STR,
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:timestamp",
}


@dataclass
class SourceMap:
    """Positions (1-based line and column) of every value and every mapping key, by data path,
    and which values were written in quotes (a message may then say to remove them)."""

    file: str
    values: dict[Path, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path, tuple[int, int]] = field(default_factory=dict)
    quoted: set[Path] = field(default_factory=set)

    def position(self, path: Path, at_key: bool = False) -> tuple[int, int]:
        """The place of ``path``, or of its nearest ancestor that has one."""
        p = tuple(path)
        while True:
            if at_key and p in self.keys:
                return self.keys[p]
            if p in self.values:
                return self.values[p]
            if not p:
                return (1, 1)
            p = p[:-1]


@dataclass(frozen=True)
class LoadIssue:
    code: str
    message: str
    line: int
    col: int
    path: Path = ()
    hint: str = ""


class YamlRejected(Exception):
    """The document could not be loaded at all (syntax error, alias bomb, ...)."""

    def __init__(self, issue: LoadIssue):
        self.issue = issue
        super().__init__(issue.message)


def _pos(node: yaml.Node) -> tuple[int, int]:
    return (node.start_mark.line + 1, node.start_mark.column + 1)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.ScalarNode):
        return []
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return list(node.value)


def _count_written(root: yaml.Node) -> int:
    """Distinct nodes, each counted once however many aliases point at it."""
    seen = {id(root)}
    stack = [root]
    while stack:
        for child in _children(stack.pop()):
            if id(child) not in seen:
                seen.add(id(child))
                stack.append(child)
    return len(seen)


def _check_depth(root: yaml.Node) -> LoadIssue | None:
    """``_check_expansion`` for a document without aliases (no ``*`` in its text): every node is
    written once, so only its depth needs checking; the nodes are met in the same order."""
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            line, col = _pos(node)
            return LoadIssue("TL102", f"the document nests deeper than {MAX_DEPTH} levels here", line, col, (),
                             "flatten the structure")
        if not isinstance(node, yaml.ScalarNode):
            stack.extend((child, depth + 1) for child in _children(node))
    return None


_composed: list = []  # (text, root) of the last document composed by compose(), taken by the next call


def compose(text: str) -> yaml.Node | None:
    """The YAML node graph of ``text`` (the C loader when there is one). The graph of a text
    composed once is handed to the next caller that asks for the same text, once: ``validate``
    reads a file's top-level keys and then loads it, and parses it once."""
    if _composed:
        held, root = _composed.pop()
        if held == text:
            return root
    return yaml.compose(text, Loader=_Loader)


def remember(text: str, root: yaml.Node | None) -> None:
    """Keep ``root`` for the next ``compose(text)``."""
    _composed[:] = [(text, root)]


def _check_expansion(root: yaml.Node) -> LoadIssue | None:
    """Refuse a document whose aliases expand it past ``MAX_ALIAS_GROWTH`` or into itself, or
    that nests deeper than ``MAX_DEPTH``.

    Works on the composed node graph, where an alias is a shared node, so the cost is linear in
    the text however large the expansion would be.
    """
    cap = _count_written(root) + MAX_ALIAS_GROWTH
    size: dict[int, int] = {}
    open_nodes: set[int] = set()  # on the current path: meeting one again means a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_nodes.discard(key)
            total = 1 + sum(size[id(c)] for c in _children(node))
            if total > cap:
                line, col = _pos(node)
                return LoadIssue(
                    "TL104",
                    f"aliases expand this node to over {cap:,} nodes, more than the "
                    f"{MAX_ALIAS_GROWTH:,} a document may add through aliases (an alias bomb)",
                    line,
                    col,
                    (),
                    "write the repeated parts out, or use fewer nested aliases",
                )
            size[key] = total
            continue
        if key in size:
            continue
        open_nodes.add(key)
        if len(open_nodes) > MAX_DEPTH:  # the open nodes are this node and its ancestors
            line, col = _pos(node)
            return LoadIssue("TL102", f"the document nests deeper than {MAX_DEPTH} levels here", line, col, (),
                             "flatten the structure")
        stack.append((node, True))
        for child in _children(node):
            if id(child) in open_nodes:
                line, col = _pos(child)
                return LoadIssue(
                    "TL104",
                    "an alias refers to the anchor that contains it, so the document would be infinite",
                    line,
                    col,
                    (),
                    "an alias may only repeat a node that does not contain it",
                )
            if id(child) not in size:
                stack.append((child, False))
    return None


class _TooDeep(Exception):
    """A node below ``MAX_DEPTH`` levels met while building: ``_check_depth`` names the finding."""


_ScalarNode, _SequenceNode = yaml.ScalarNode, yaml.SequenceNode
_CONSTRUCTORS = yaml.constructor.SafeConstructor.yaml_constructors


class _Builder:
    """Plain data and its source map from the node graph, in one walk that also bounds its depth:
    a node deeper than ``MAX_DEPTH`` raises ``_TooDeep``; where the walk does not go (a key that is
    not a scalar, a merge of something other than a mapping), ``unwalked`` says the depth of the
    whole graph is still to be checked."""

    def __init__(self, file: str):
        self.smap = SourceMap(file)
        self.issues: list[LoadIssue] = []
        self.unwalked = False
        self._scalars = yaml.constructor.SafeConstructor()

    def build(self, node: yaml.Node, path: Path, depth: int = 1) -> Any:
        if depth > MAX_DEPTH:
            raise _TooDeep
        mark = node.start_mark
        self.smap.values[path] = (mark.line + 1, mark.column + 1)
        if isinstance(node, _ScalarNode):
            if node.tag == _STR and not node.style:
                return node.value
            return self._scalar(node, path)
        depth += 1
        if isinstance(node, _SequenceNode):
            if node.tag != _SEQ:
                self._tag(node, path)
            return [self.build(child, path + (i,), depth) for i, child in enumerate(node.value)]
        if node.tag != _MAP:
            self._tag(node, path)
        out: dict[str, Any] = {}
        merged: set[str] = set()  # keys a '<<' merge gave, which a key of the mapping itself overrides
        keys = self.smap.keys
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                self._merge(out, value_node, path, depth, merged)
                continue
            if not isinstance(key_node, _ScalarNode):
                self.unwalked = True
                line, col = _pos(key_node)
                self.issues.append(LoadIssue("TL105", "a mapping key must be a plain scalar", line, col, path))
                continue
            # keys are always text, as written: YAML 1.1 would read 'on:' (a retry key) as true
            key = key_node.value
            here = path + (key,)
            mark = key_node.start_mark
            line, col = mark.line + 1, mark.column + 1
            if key in out and key not in merged:
                first = keys.get(here, (line, col))
                self.issues.append(
                    LoadIssue(
                        "TL103",
                        f"duplicate key {quoted(key)} (first defined at line {first[0]})",
                        line,
                        col,
                        here,
                        "remove one of the two entries",
                    )
                )
                continue
            merged.discard(key)
            keys[here] = (line, col)
            out[key] = self.build(value_node, here, depth)
        return out

    def _merge(self, out: dict, value_node: yaml.Node, path: Path, depth: int, merged: set[str]) -> None:
        listed = isinstance(value_node, yaml.SequenceNode)
        sources = value_node.value if listed else [value_node]
        for src in sources:
            if not isinstance(src, yaml.MappingNode):
                self.unwalked = True
                line, col = _pos(src)
                self.issues.append(LoadIssue("TL105", "'<<' merges only mappings", line, col, path))
                continue
            for k, v in self.build(src, path, depth + 1 if listed else depth).items():
                if k not in out:
                    out[k] = v
                    merged.add(k)

    def _scalar(self, node: yaml.ScalarNode, path: Path) -> Any:
        if node.style in ("'", '"'):
            self.smap.quoted.add(path)
        if node.tag == _STR:
            return node.value
        if node.tag == "tag:yaml.org,2002:timestamp":
            return node.value  # dates stay the text the user wrote: JSON has no date type
        if node.tag not in _SCALAR_TAGS:
            self._tag(node, path)
            return None
        try:
            # the tag's constructor itself: what construct_object would call, without its bookkeeping
            value = _CONSTRUCTORS[node.tag](self._scalars, node)
        except Exception:  # noqa: BLE001 - PyYAML's constructors fail in many ways on text they cannot read
            value = _UNREADABLE  # e.g. '!!int false', '!!bool maybe', or an integer of 5,000 digits
        if value is None and node.value not in _NULLS:
            value = _UNREADABLE  # '!!null something'
        if value is _UNREADABLE:
            line, col = _pos(node)
            what = _TAG_WORDS.get(node.tag, "a value of its tag")
            too_long = node.tag.endswith(":int") and len(node.value) > 4000
            self.issues.append(
                LoadIssue("TL105", f"{quoted(node.value)} is not {what}"
                          + (" that can be read (more than 4,000 digits)" if too_long else ""),
                          line, col, path, "remove the tag, or write a value of the type it names")
            )
            return None
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            line, col = _pos(node)
            self.issues.append(
                LoadIssue("TL105", f"{quoted(node.value)} is not a JSON number", line, col, path, "write a finite number")
            )
            return None
        return value

    def _tag(self, node: yaml.Node, path: Path) -> None:
        line, col = _pos(node)
        self.issues.append(
            LoadIssue(
                "TL105",
                f"tag {quoted(node.tag)} is not allowed (safe YAML only)",
                line,
                col,
                path,
                "remove the tag; only plain YAML/JSON values are accepted",
            )
        )


_UNREADABLE = object()
_NULLS = ("", "~", "null", "Null", "NULL")
_TAG_WORDS = {
    "tag:yaml.org,2002:int": "a whole number",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:bool": "true or false",
    "tag:yaml.org,2002:null": "null",
}

_SYNTAX_HINT = "fix the YAML here: indent with spaces, not tabs, and close every quote and bracket"


def load_yaml(text: str, file: str) -> tuple[Any, SourceMap, list[LoadIssue]]:
    """Parse ``text`` into plain data plus its source map.

    Raises ``YamlRejected`` when nothing usable can be built; returns per-node issues
    (duplicate keys, bad tags) alongside the data otherwise.
    """
    try:
        root = compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        what = exc.problem or str(exc)
        if exc.context:
            what = f"{exc.context}: {what}"
            ctx = exc.context_mark
            if ctx is not None and exc.problem_mark is not None and ctx.line != exc.problem_mark.line:
                what += f" (the construct began at line {ctx.line + 1}, column {ctx.column + 1})"
        raise YamlRejected(
            LoadIssue("TL102", f"YAML syntax error: {clip(what)}", line, col, (), _SYNTAX_HINT)
        ) from None
    except yaml.YAMLError as exc:
        raise YamlRejected(LoadIssue("TL102", f"YAML syntax error: {clip(str(exc))}", 1, 1, (), _SYNTAX_HINT)) from None
    if root is None:
        raise YamlRejected(LoadIssue("TL106", "the document is empty", 1, 1, (), "write a YAML mapping"))
    if "*" in text:
        refused = _check_expansion(root)
        if refused is not None:
            raise YamlRejected(refused)
    # without aliases every node is written once: the walk that builds the data bounds its depth,
    # and the finding is the one the depth walk alone names (the same node, line and column)
    builder = _Builder(file)
    too_deep, data = False, None
    try:
        data = builder.build(root, ())
    except _TooDeep:
        too_deep = True
    if too_deep or builder.unwalked:
        refused = _check_depth(root)
        if refused is not None:
            raise YamlRejected(refused)
    return data, builder.smap, builder.issues
