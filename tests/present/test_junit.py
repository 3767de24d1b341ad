"""junit: the gate's assertions as JUnit XML and as GitHub Actions workflow commands."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable

import pytest

from hicache_cli.analysis.gate import Assertion, Thresholds, evaluate
from hicache_cli.analysis.results import Report, Verdict
from hicache_cli.config import StressConfig
from hicache_cli.present.github import github_annotations
from hicache_cli.present.junit import junit_xml

MakeReport = Callable[..., Report]


def suite_of(xml: str) -> ET.Element:
    root = ET.fromstring(xml.encode("utf-8"))
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    return suites[0]


def properties(suite: ET.Element) -> dict[str, str]:
    return {p.get("name"): p.get("value") for p in suite.find("properties").findall("property")}


@pytest.fixture
def leaking(make_pp2_report: MakeReport) -> tuple[list[Assertion], Report]:
    """A leaking pp=2 run judged against 100 MB/h, a depth of 2 and a p99 of 5 ms."""
    report = make_pp2_report(leaking=True)
    return evaluate(report, Thresholds(max_rss_slope_mb_per_h=100.0, max_depth=2, max_p99_ms=5.0)), report


def test_junit_counts_match_the_assertions(leaking: tuple[list[Assertion], Report]) -> None:
    results, report = leaking
    xml = junit_xml(results, report, wall_s=61.5)
    assert xml.startswith('<?xml version="1.0" encoding="utf-8"?>')
    suite = suite_of(xml)

    failed = sum(a.passed is False for a in results)
    assert failed == 3  # rank 0: bounded, rss-slope, max-depth
    assert suite.get("name") == "hicache check reap"
    assert int(suite.get("tests")) == len(results) == len(suite.findall("testcase"))
    assert int(suite.get("failures")) == failed == len(suite.findall("testcase/failure"))
    assert int(suite.get("errors")) == 0 == len(suite.findall("testcase/error"))
    assert float(suite.get("time")) == pytest.approx(61.5)


def test_one_testcase_per_assertion_per_rank(leaking: tuple[list[Assertion], Report]) -> None:
    results, report = leaking
    cases = suite_of(junit_xml(results, report, 1.0)).findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        (f"hicache.reap.rank{a.rank}", a.name) for a in results
    ]
    assert {c.get("classname") for c in cases} == {"hicache.reap.rank0", "hicache.reap.rank1"}


def test_failures_carry_the_message_and_passes_their_output(
    leaking: tuple[list[Assertion], Report],
) -> None:
    results, report = leaking
    cases = suite_of(junit_xml(results, report, 1.0)).findall("testcase")
    for assertion, case in zip(results, cases, strict=True):
        failure = case.find("failure")
        if assertion.passed is False:
            assert failure is not None
            assert failure.get("message") == assertion.message
            assert failure.text == assertion.message
            assert failure.get("type") == assertion.name
        else:
            assert failure is None
            assert case.find("system-out").text == assertion.message
    slope = next(c for c in cases if c.get("classname") == "hicache.reap.rank0" and c.get("name") == "rss-slope")
    assert "exceeds 100 MB/h by 80 MB/h" in slope.find("failure").get("message")


def test_properties_include_policy_and_verdict(leaking: tuple[list[Assertion], Report]) -> None:
    results, report = leaking
    props = properties(suite_of(junit_xml(results, report, 1.0)))
    assert props["policy"] == "reap"
    assert props["verdict"] == "LEAK"
    assert props["pp"] == "2"
    assert props["tp"] == "1"
    assert props["workload"] == report.config.target.workload
    assert props["seed"] == str(report.config.target.seed)


def test_a_failed_run_is_an_error_on_the_run(make_pp2_report: MakeReport) -> None:
    report = make_pp2_report(leaking=False, final=False)
    results = evaluate(report, Thresholds())
    suite = suite_of(junit_xml(results, report, 2.0))

    assert int(suite.get("errors")) == 1
    assert int(suite.get("failures")) == 0
    run = suite.find("testcase[@classname='hicache.drain.run']")
    assert run is not None
    assert run.get("name") == "run"
    error = run.find("error")
    assert error.get("type") == "undecided"
    assert error.get("message") == results[0].message
    assert "the run failed" in error.text


def test_a_straddling_assertion_is_an_error() -> None:
    report = Report(config=StressConfig(policy="drain"), verdict=Verdict.INCONCLUSIVE)
    results = [Assertion(0, "rss-slope", None, "rank 0 RSS slope +150 MB/h [95% +90, +210] straddles 200 MB/h")]
    suite = suite_of(junit_xml(results, report, 0.0))
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("1", "0", "1")
    assert suite.find("testcase/error").get("message") == results[0].message


def test_markup_in_messages_is_escaped() -> None:
    message = 'rank 0 error: <Work "x"> & friends\nsecond line'
    report = Report(config=StressConfig(policy="reap"), verdict=Verdict.LEAK)
    failure = suite_of(junit_xml([Assertion(0, "bounded", False, message)], report, 0.0)).find("testcase/failure")
    assert failure.text == message
    assert failure.get("message") == message


def test_control_characters_in_a_message_still_give_well_formed_xml() -> None:
    message = "the run failed: rank 1 error: \x1b[31mRuntimeError\x1b[0m: peer went away"
    report = Report(config=StressConfig(policy="reap"), verdict=Verdict.INCONCLUSIVE)
    suite = suite_of(junit_xml([Assertion(None, "run", None, message)], report, 0.0))
    assert "RuntimeError" in suite.find("testcase/error").get("message")


# GitHub annotations


def test_annotations_error_for_failures_warning_for_undecided_nothing_for_passes() -> None:
    results = [
        Assertion(0, "bounded", False, "rank 0 LEAK: work list grows"),
        Assertion(0, "rss-slope", None, "rank 0 RSS slope straddles 200 MB/h"),
        Assertion(1, "bounded", True, "rank 1 BOUNDED"),
    ]
    assert github_annotations(results, "reap") == [
        "::error title=hicache check (reap)::rank 0 LEAK: work list grows",
        "::warning title=hicache check (reap)::rank 0 RSS slope straddles 200 MB/h",
    ]


def test_no_annotations_when_everything_passed(make_pp2_report: MakeReport) -> None:
    results = evaluate(make_pp2_report(leaking=False), Thresholds())
    assert all(a.passed for a in results)
    assert github_annotations(results, "drain") == []


def test_annotations_of_a_leaking_run(leaking: tuple[list[Assertion], Report]) -> None:
    results, _ = leaking
    lines = github_annotations(results, "reap")
    assert len(lines) == 3
    assert all(line.startswith("::error title=hicache check (reap)::rank 0 ") for line in lines)


def test_annotation_messages_escape_newlines_and_percent() -> None:
    (line,) = github_annotations([Assertion(0, "bounded", False, "50% of\nthe list\r\nleaks")], "reap")
    assert line == "::error title=hicache check (reap)::50%25 of%0Athe list%0D%0Aleaks"
    assert "\n" not in line and "\r" not in line
