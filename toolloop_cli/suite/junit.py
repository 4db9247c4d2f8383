"""JUnit XML of ``test`` records, as CI systems read it: a ``testsuite`` per suite file, a
``testcase`` per case, a ``failure`` element in a failed case and an ``error`` element in an
errored one (each failure in full in its text)."""

from __future__ import annotations

import json
import re
from typing import Iterable
from xml.etree import ElementTree as ET


def failure_lines(rec: dict) -> list[str]:
    """Each failure of a ``test`` record as a line: the expectation, what was wanted, what came."""
    return [f"{f['expect']}: wanted {_j(f['wanted'])}, got {_j(f['got'])}" for f in rec.get("failures") or []]


def _j(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


#: characters XML 1.0 cannot hold at all (control characters but tab and line ends, lone surrogates)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _x(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def junit_xml(records: Iterable[dict]) -> bytes:
    root = ET.Element("testsuites")
    suites: dict[str, ET.Element] = {}
    totals: dict[str, dict[str, float]] = {}
    for rec in records:
        if rec.get("type") != "test":
            continue
        name = str(rec["suite"])
        if name not in suites:
            suites[name] = ET.SubElement(root, "testsuite", name=_x(name))
            totals[name] = {"tests": 0, "failures": 0, "errors": 0, "time": 0.0}
        t = totals[name]
        seconds = float(rec.get("duration_ms") or 0) / 1000
        t["tests"] += 1
        t["time"] += seconds
        case = ET.SubElement(suites[name], "testcase", name=_x(str(rec["name"])), classname=_x(name),
                             time=f"{seconds:.3f}")
        lines = failure_lines(rec)
        if rec.get("diff"):
            lines.append(str(rec["diff"]))
        text = _x("\n".join(lines))
        first = _x(lines[0] if lines else rec["status"])
        if rec["status"] == "fail":
            t["failures"] += 1
            ET.SubElement(case, "failure", message=first[:500], type="expectation").text = text
        elif rec["status"] == "error":
            t["errors"] += 1
            ET.SubElement(case, "error", message=first[:500], type="error").text = text
        if rec.get("runs", 1) > 1:
            ET.SubElement(case, "system-out").text = f"{rec['passed']} of {rec['runs']} runs passed"
    for name, el in suites.items():
        t = totals[name]
        for key in ("tests", "failures", "errors"):
            el.set(key, str(int(t[key])))
        el.set("time", f"{t['time']:.3f}")
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
