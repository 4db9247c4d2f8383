"""Loading YAML builds data, positions and depth in one walk: what it reports must be what the
separate walks reported (the same data, source map and findings, the same node for a too-deep
document, in every shape the walks differ in)."""

from __future__ import annotations

import pytest
import yaml

from toolloop_cli.contract.source import MAX_DEPTH, YamlRejected, _check_depth, _Loader, load_yaml


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


SHAPES = {
    "last key": lambda inner: f"a: 1\nb: {inner}\n",
    "first key": lambda inner: f"b: {inner}\na: 1\n",
    # two places too deep: the finding names the one the depth walk meets first (the later one)
    "two places": lambda inner: f"a: [[[{inner}]]]\nb: {{c: {inner}}}\n",
    "merged mapping": lambda inner: f"x:\n  <<: {{k: {inner}}}\n",
    "merged list": lambda inner: f"x:\n  <<: [{{k: {inner}}}]\n",
    "merge of a list": lambda inner: f"x:\n  <<: [{inner}]\n",
    "complex key": lambda inner: f"? {{k: {inner}}}\n: 1\n",
    "alias": lambda inner: f"a: &x {inner}\nb: *x\n",
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("depth", [MAX_DEPTH - 3, MAX_DEPTH - 2, MAX_DEPTH - 1, MAX_DEPTH, 150])
def test_a_too_deep_document_is_refused_at_the_node_the_depth_walk_names(shape, depth):
    text = SHAPES[shape](nested(depth))
    expected = _check_depth(yaml.compose(text, Loader=_Loader))
    if expected is None:
        data, _, _ = load_yaml(text, "f.yml")
        assert data is not None
        return
    with pytest.raises(YamlRejected) as exc:
        load_yaml(text, "f.yml")
    assert exc.value.issue == expected
    assert "nests deeper than 100 levels" in expected.message


def test_the_depth_bound_is_exact():
    load_yaml(f"a: {nested(MAX_DEPTH - 1)}\n", "f.yml")  # the top mapping and 99 lists: 100 levels
    with pytest.raises(YamlRejected) as exc:
        load_yaml(f"a: {nested(MAX_DEPTH)}\n", "f.yml")
    assert (exc.value.issue.line, exc.value.issue.col) == (1, 4 + MAX_DEPTH - 1)


def test_data_positions_quotes_and_findings_of_every_kind_of_scalar():
    text = ("a: plain\nb: 'single'\nc: \"double\"\nd: 12\ne: 1.5e3\nf: true\ng: null\nh: ~\ni: 2024-01-02\n"
            "j: |\n  lit\nk: !!int nope\nl: .inf\nm: !custom x\nn: [1, 'two', {x: 3}]\na: dup\n")
    data, smap, issues = load_yaml(text, "f.yml")
    assert data == {"a": "plain", "b": "single", "c": "double", "d": 12, "e": 1500.0, "f": True, "g": None,
                    "h": None, "i": "2024-01-02", "j": "lit\n", "k": None, "l": None, "m": None,
                    "n": [1, "two", {"x": 3}]}
    assert smap.values[("n", 2, "x")] == (15, 19) and smap.values[("n", 1)] == (15, 8)
    assert smap.keys[("n", 2, "x")] == (15, 16) and smap.keys[("k",)] == (12, 1)
    assert smap.quoted == {("b",), ("c",), ("n", 1)}
    assert [(i.code, i.line, i.col, i.path, i.message) for i in issues] == [
        ("TL105", 12, 4, ("k",), "'nope' is not a whole number"),
        ("TL105", 13, 4, ("l",), "'.inf' is not a JSON number"),
        ("TL105", 14, 4, ("m",), "tag '!custom' is not allowed (safe YAML only)"),
        ("TL103", 16, 1, ("a",), "duplicate key 'a' (first defined at line 1)"),
    ]


def test_merges_and_a_scalar_read_twice_through_an_alias():
    text = "base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\nlist:\n  <<: [*b, {z: 4}]\nbad:\n  <<: 5\nn: &n !!int nope\nm: *n\n"
    data, smap, issues = load_yaml(text, "f.yml")
    # a key of the mapping itself overrides the one a merge gives, as YAML's merge key says
    assert data["other"] == {"x": 1, "y": 3} and data["list"] == {"x": 1, "y": 2, "z": 4} and data["bad"] == {}
    assert data["n"] is None and data["m"] is None
    assert [(i.code, i.line, i.col, i.path) for i in issues] == [
        ("TL105", 8, 7, ("bad",)), ("TL105", 9, 4, ("n",)), ("TL105", 9, 4, ("m",))]


@pytest.mark.parametrize("text, data_other, line", [
    ("base: &b {x: 1, y: 2}\nother:\n  y: 3\n  <<: *b\n", {"y": 3, "x": 1}, None),  # the merge fills in only
    ("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\n  y: 4\n", {"x": 1, "y": 3}, 5),  # written twice
    ("base: &b {x: 1}\nother:\n  <<: [*b, {x: 2}]\n", {"x": 1}, None),  # the first merged mapping wins
])
def test_a_key_written_in_the_mapping_overrides_a_merged_one_but_not_another_written_one(text, data_other, line):
    data, _smap, issues = load_yaml(text, "f.yml")
    assert data["other"] == data_other
    assert [(i.code, i.line) for i in issues] == ([("TL103", line)] if line else [])
