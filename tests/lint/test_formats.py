"""The output formats: text lines, the JSON shape, SARIF 2.1.0 as GitHub code scanning needs
it (checked field by field), and GitHub workflow commands with their escaping."""

from __future__ import annotations

import json
from typing import Any

from hicache_cli.lint.findings import Finding, InputProblem, LintResult, Related
from hicache_cli.lint.formats import FORMATS, github, json_report, sarif, text
from hicache_cli.lint.rules import RULES

KEPT = Related("pkg/cache.py", 273, 9, "kept in self.work_list")
HC001 = Finding(
    "pkg/cache.py", 270, "HC001", "HiRadixCache._pp_sync", "the Work from isend is kept", 272, 21, 9, (KEPT,)
)
HC002 = Finding("/abs/drain.py", 12, "HC002", "C.drain", "drain of self.works: 100%, a,b\nnext")
RESULT = LintResult(
    findings=[HC001, HC002],
    rules=["HC001", "HC002", "HC003"],
    problems=[InputProblem("missing.py", "no such file or directory")],
    files=3,
    parsed=2,
    suppressed=1,
    seconds=0.25,
)


def test_the_registry_of_formats() -> None:
    assert list(FORMATS) == ["text", "json", "sarif", "github"]


def test_text_is_one_line_per_finding() -> None:
    first, second = text.render(RESULT).split("\n", 1)
    assert first == "pkg/cache.py:270:21: HC001 the Work from isend is kept"
    assert second.startswith("/abs/drain.py:12: HC002 ")  # no column known: none shown
    assert text.render(LintResult()) == ""


def test_the_summary_line() -> None:
    line = text.summary(RESULT)
    assert line.startswith("hicache lint: 2 findings (HC001 1, HC002 1) in 3 files (2 analysed), 1 suppressed")
    assert "1 unreadable" in line and line.endswith("rules HC001,HC002,HC003")


def test_json_findings_have_the_documented_keys() -> None:
    data = json.loads(json_report.render(RESULT))
    assert data["findings"][0] == {
        "rule": "HC001",
        "level": "error",
        "file": "pkg/cache.py",
        "line": 270,
        "column": 21,
        "end_line": 272,
        "end_column": 9,
        "function": "HiRadixCache._pp_sync",
        "message": "the Work from isend is kept",
        "related": [{"file": "pkg/cache.py", "line": 273, "column": 9, "message": "kept in self.work_list"}],
    }
    assert data["schema_version"] == 2
    assert data["problems"] == [{"target": "missing.py", "reason": "no such file or directory"}]
    assert (data["files"], data["analysed"], data["suppressed"], data["rules"]) == (3, 2, 1, RESULT.rules)


def check_sarif_for_github(log: dict[str, Any]) -> None:
    """What GitHub code scanning reads from an uploaded SARIF 2.1.0 file."""
    assert log["version"] == "2.1.0"
    assert log["$schema"].endswith("sarif-2.1.0.json")
    assert isinstance(log["runs"], list) and log["runs"]
    for run in log["runs"]:
        driver = run["tool"]["driver"]
        assert isinstance(driver["name"], str) and driver["name"]
        rules = driver["rules"]
        ids = [rule["id"] for rule in rules]
        assert len(set(ids)) == len(ids)
        for rule in rules:
            assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
            assert rule["defaultConfiguration"]["level"] in ("none", "note", "warning", "error")
        for result in run["results"]:
            assert result["ruleId"] in ids
            assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
            assert result["level"] in ("none", "note", "warning", "error")
            assert isinstance(result["message"]["text"], str) and result["message"]["text"]
            assert result["locations"]
            for location in result["locations"]:
                physical = location["physicalLocation"]
                assert isinstance(physical["artifactLocation"]["uri"], str)
                region = physical["region"]
                assert isinstance(region["startLine"], int) and region["startLine"] >= 1
                assert region.get("endLine", region["startLine"]) >= region["startLine"]
        for invocation in run.get("invocations", []):
            assert isinstance(invocation["executionSuccessful"], bool)


def test_sarif_has_the_shape_github_needs() -> None:
    log = json.loads(sarif.render(RESULT))
    check_sarif_for_github(log)
    run = log["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == RESULT.rules
    assert run["tool"]["driver"]["rules"][0]["shortDescription"]["text"] == RULES["HC001"].summary()
    first, second = run["results"]
    assert first["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "pkg/cache.py"
    # 1-based columns; SARIF's endColumn is one past the last character
    region = {"startLine": 270, "endLine": 272, "startColumn": 21, "endColumn": 10}
    assert first["locations"][0]["physicalLocation"]["region"] == region
    assert first["relatedLocations"] == [
        {
            "id": 1,
            "message": {"text": "kept in self.work_list"},
            "physicalLocation": {
                "artifactLocation": {"uri": "pkg/cache.py"},
                "region": {"startLine": 273, "endLine": 273, "startColumn": 9},
            },
        }
    ]
    assert first["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == "HiRadixCache._pp_sync"
    assert second["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "file:///abs/drain.py"
    assert (first["level"], second["level"]) == ("error", "warning")
    [invocation] = run["invocations"]
    assert invocation["executionSuccessful"] is False
    assert invocation["toolExecutionNotifications"][0]["message"]["text"] == "missing.py: no such file or directory"


def test_sarif_without_findings_is_still_a_complete_log() -> None:
    log = json.loads(sarif.render(LintResult(rules=["HC001"])))
    check_sarif_for_github(log)
    assert log["runs"][0]["results"] == []
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] is True


def test_github_annotations_escape_what_workflow_commands_need() -> None:
    first, second = github.render(RESULT).splitlines()
    props = "file=pkg/cache.py,line=270,endLine=272,col=21,title=HC001 work-kept-never-waited"
    assert first == f"::error {props}::the Work from isend is kept"
    assert second.startswith("::warning file=/abs/drain.py,line=12,endLine=12,title=HC002 drain-without-timeout::")
    assert second.endswith("drain of self.works: 100%25, a,b%0Anext")
