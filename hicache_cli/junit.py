"""JUnit XML for CI systems: one test case per assertion per rank."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from hicache_cli.gate import Assertion


def junit_xml(results: list[Assertion], report: dict[str, Any], wall_s: float) -> str:
    policy = report["config"]["policy"]
    failures = sum(a.passed is False for a in results)
    errors = sum(a.passed is None for a in results)
    suites = ET.Element("testsuites")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"hicache check {policy}",
        tests=str(len(results)),
        failures=str(failures),
        errors=str(errors),
        time=f"{wall_s:.3f}",
    )
    props = ET.SubElement(suite, "properties")
    cfg = report["config"]
    for key in ("policy", "pp", "tp", "duration_s", "workload", "seed"):
        ET.SubElement(props, "property", name=key, value=str(cfg.get(key)))
    ET.SubElement(props, "property", name="verdict", value=str(report["verdict"]))
    for a in results:
        where = "run" if a.rank is None else f"rank{a.rank}"
        case = ET.SubElement(suite, "testcase", classname=f"hicache.{policy}.{where}", name=a.name, time="0")
        if a.passed is False:
            ET.SubElement(case, "failure", message=a.message, type=a.name).text = a.message
        elif a.passed is None:
            ET.SubElement(case, "error", message=a.message, type="undecided").text = a.message
        else:
            ET.SubElement(case, "system-out").text = a.message
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def github_annotations(results: list[Assertion], policy: str) -> list[str]:
    """Workflow commands GitHub Actions turns into annotations on the run."""
    lines = []
    for a in results:
        if a.passed is False:
            lines.append(f"::error title=hicache check ({policy})::{_escape(a.message)}")
        elif a.passed is None:
            lines.append(f"::warning title=hicache check ({policy})::{_escape(a.message)}")
    return lines


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
