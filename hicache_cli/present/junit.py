"""JUnit XML for CI systems: one test case per assertion per rank (GitHub's annotations: github.py)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from hicache_cli.analysis.gate import Assertion
from hicache_cli.analysis.results import Report

_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _xml_text(text: str) -> str:
    """XML 1.0 has no place for most control characters (a rank's error may carry colour codes)."""
    return _NOT_XML.sub("?", text)


def junit_xml(results: list[Assertion], report: Report, wall_s: float) -> str:
    policy = report.config.label
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
    for key, value in report.config.properties().items():
        ET.SubElement(props, "property", name=key, value=str(value))
    ET.SubElement(props, "property", name="verdict", value=str(report.verdict))
    for a in results:
        where = "run" if a.rank is None else f"rank{a.rank}"
        case = ET.SubElement(suite, "testcase", classname=f"hicache.{policy}.{where}", name=a.name, time="0")
        message = _xml_text(a.message)
        if a.passed is False:
            ET.SubElement(case, "failure", message=message, type=a.name).text = message
        elif a.passed is None:
            ET.SubElement(case, "error", message=message, type="undecided").text = message
        else:
            ET.SubElement(case, "system-out").text = message
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
