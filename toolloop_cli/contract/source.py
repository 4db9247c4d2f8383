"""Explicit YAML loading with a source map kept beside the data.

Only the safe YAML subset is accepted: standard tags, no language objects. Duplicate keys are
reported at their second occurrence; anchors and aliases are allowed but the expanded size is
bounded before anything is built, so an alias bomb is refused at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

import yaml

Path = tuple[Union[str, int], ...]

#: The largest number of nodes a document may have once every alias is expanded.
MAX_EXPANDED_NODES = 2_000_000

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
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
    """Positions (1-based line and column) of every value and every mapping key, by data path."""

    file: str
    values: dict[Path, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path, tuple[int, int]] = field(default_factory=dict)

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


def _expanded_size(root: yaml.Node) -> int:
    memo: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in memo:
            continue
        if isinstance(node, yaml.ScalarNode):
            memo[key] = 1
            continue
        children = (
            [n for pair in node.value for n in pair]
            if isinstance(node, yaml.MappingNode)
            else list(node.value)
        )
        if done:
            total = 1
            for c in children:
                total += memo[id(c)]
                if total > MAX_EXPANDED_NODES:
                    return total
            memo[key] = total
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in memo)
    return memo[id(root)]


class _Builder:
    def __init__(self, file: str):
        self.smap = SourceMap(file)
        self.issues: list[LoadIssue] = []
        self._scalars = yaml.constructor.SafeConstructor()

    def build(self, node: yaml.Node, path: Path) -> Any:
        self.smap.values[path] = _pos(node)
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, path)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _SEQ:
                self._tag(node, path)
            return [self.build(child, path + (i,)) for i, child in enumerate(node.value)]
        if node.tag != _MAP:
            self._tag(node, path)
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                self._merge(out, value_node, path)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                line, col = _pos(key_node)
                self.issues.append(LoadIssue("TL105", "a mapping key must be a plain scalar", line, col, path))
                continue
            # keys are always text, as written: YAML 1.1 would read 'on:' (a retry key) as true
            key = key_node.value
            line, col = _pos(key_node)
            if key in out:
                first = self.smap.keys.get(path + (key,), (line, col))
                self.issues.append(
                    LoadIssue(
                        "TL103",
                        f"duplicate key '{key}' (first defined at line {first[0]})",
                        line,
                        col,
                        path + (key,),
                        "remove one of the two entries",
                    )
                )
                continue
            self.smap.keys[path + (key,)] = (line, col)
            out[key] = self.build(value_node, path + (key,))
        return out

    def _merge(self, out: dict, value_node: yaml.Node, path: Path) -> None:
        sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        for src in sources:
            if not isinstance(src, yaml.MappingNode):
                line, col = _pos(src)
                self.issues.append(LoadIssue("TL105", "'<<' merges only mappings", line, col, path))
                continue
            merged = self.build(src, path)
            for k, v in merged.items():
                out.setdefault(k, v)

    def _scalar(self, node: yaml.ScalarNode, path: Path) -> Any:
        if node.tag == _STR:
            return node.value
        if node.tag == "tag:yaml.org,2002:timestamp":
            return node.value  # dates stay the text the user wrote: JSON has no date type
        if node.tag not in _SCALAR_TAGS:
            self._tag(node, path)
            return None
        value = self._scalars.construct_object(node)
        if isinstance(value, float) and value != value:
            line, col = _pos(node)
            self.issues.append(LoadIssue("TL105", "NaN is not a JSON value", line, col, path))
        return value

    def _tag(self, node: yaml.Node, path: Path) -> None:
        line, col = _pos(node)
        self.issues.append(
            LoadIssue(
                "TL105",
                f"tag '{node.tag}' is not allowed (safe YAML only)",
                line,
                col,
                path,
                "remove the tag; only plain YAML/JSON values are accepted",
            )
        )


def load_yaml(text: str, file: str) -> tuple[Any, SourceMap, list[LoadIssue]]:
    """Parse ``text`` into plain data plus its source map.

    Raises ``YamlRejected`` when nothing usable can be built; returns per-node issues
    (duplicate keys, bad tags) alongside the data otherwise.
    """
    try:
        root = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        what = exc.problem or str(exc)
        if exc.context:
            what = f"{exc.context}: {what}"
        raise YamlRejected(LoadIssue("TL102", f"YAML syntax error: {what}", line, col)) from None
    except yaml.YAMLError as exc:
        raise YamlRejected(LoadIssue("TL102", f"YAML syntax error: {exc}", 1, 1)) from None
    if root is None:
        raise YamlRejected(LoadIssue("TL106", "the document is empty", 1, 1, (), "write a YAML mapping"))
    size = _expanded_size(root)
    if size > MAX_EXPANDED_NODES:
        raise YamlRejected(
            LoadIssue(
                "TL104",
                f"the document expands to more than {MAX_EXPANDED_NODES:,} nodes through aliases",
                1,
                1,
                (),
                "use fewer nested aliases",
            )
        )
    builder = _Builder(file)
    data = builder.build(root, ())
    return data, builder.smap, builder.issues
