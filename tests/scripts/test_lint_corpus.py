"""scripts/lint_corpus.py: the corpus table, the ground-truth matching, and one real run of the
script on a two-project corpus (the engine in a process per project, as on a real corpus); the
Work sites found apart from the engine (--sites) and a wait deleted (--delete-wait)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from scripts.lint_corpus import (
    CorpusError,
    Found,
    Known,
    ProjectRun,
    commit_of,
    delete_wait,
    main,
    match_truth,
    projects_in,
    read_manifest,
    read_truth,
    render_markdown,
    table_rows,
    work_sites,
)
from tests.lint.conftest import line_of
from tests.lint.test_kept_never_waited import SGLANG_0_5_14, SGLANG_0_5_15

TRUTH_HEADER = "project\tfile\tline\tshape\tjudgement\tkeep\n"


def finding(file: str, line: int, rule: str = "HC001", end_line: int = 0) -> Found:
    return Found(file, line, max(line, end_line), rule, "message")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_truth_rows_are_read_by_header_name(tmp_path: Path) -> None:
    truth = write(tmp_path / "t.tsv", TRUTH_HEADER + "p\ta/b.py\t12\tattribute\tLEAK-SHAPE\tself.works\n")
    assert read_truth(truth) == [Known("p", "a/b.py", 12, "attribute", "LEAK-SHAPE")]


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ("p\ta.py\ttwelve\tattribute\tWAITED\t-\n", "t.tsv:2: line is not a number"),
        ("p\ta.py\t12\tattribute\tLEAKY\t-\n", "t.tsv:2: judgement 'LEAKY' is none of"),
    ],
)
def test_a_bad_truth_row_is_named_by_its_line(tmp_path: Path, row: str, says: str) -> None:
    truth = write(tmp_path / "t.tsv", TRUTH_HEADER + row)
    with pytest.raises(CorpusError, match=says):
        read_truth(truth)


def test_a_truth_without_a_judgement_column_is_refused(tmp_path: Path) -> None:
    truth = write(tmp_path / "t.tsv", "project\tfile\tline\tshape\np\ta.py\t1\tx\n")
    with pytest.raises(CorpusError, match="no judgement column"):
        read_truth(truth)


def test_findings_are_matched_to_the_site_their_statement_spans() -> None:
    known = [
        Known("p", "leak.py", 10, "attribute", "LEAK-SHAPE"),
        Known("p", "leak.py", 40, "closure", "LEAK-SHAPE"),
        Known("p", "waited.py", 7, "record-field", "WAITED"),
        Known("p", "drop.py", 3, "dropped", "DROPPED"),
        Known("p", "drop.py", 9, "dropped", "DROPPED"),
        Known("q", "other.py", 1, "attribute", "LEAK-SHAPE"),  # q did not run: neither found nor missed
    ]
    run = ProjectRun(
        "p",
        findings=[
            finding("leak.py", 8, end_line=11),  # a call over lines 8-11 spans the site at 10
            finding("waited.py", 7),
            finding("drop.py", 3, rule="HC004"),
            finding("drop.py", 9, rule="HC001"),
            finding("new.py", 5),
        ],
    )
    report = match_truth([run], known)
    assert [(k.line, f.line) for k, f in report.found] == [(10, 8)]
    assert [(k.file, k.line) for k in report.missed] == [("leak.py", 40)]
    assert [(k.file, f.rule) for k, f in report.false_positives] == [("waited.py", "HC001"), ("drop.py", "HC001")]
    assert [(k.file, f.rule) for k, f in report.to_judge_known] == [("drop.py", "HC004")]
    assert [(p, f.file) for p, f in report.not_in_truth] == [("p", "new.py")]


def test_a_project_that_failed_is_not_counted_as_missing_its_sites() -> None:
    known = [Known("p", "leak.py", 10, "attribute", "LEAK-SHAPE")]
    assert match_truth([ProjectRun("p", error="boom")], known).missed == []


def test_the_table_has_a_column_per_rule_seen_and_the_truth_cells() -> None:
    runs = [
        ProjectRun("a", "0123456789abcdef0123456789abcdef01234567", 10, 2, 0.5, 30.0, 0, [finding("x.py", 3)]),
        ProjectRun("b", "-", 5, 1, 0.1, 20.0, 1, [finding("y.py", 4, "HC004"), finding("y.py", 9, "HC004")]),
        ProjectRun("c", error="Traceback: boom"),
    ]
    truth = match_truth(runs, [Known("a", "x.py", 3, "attribute", "LEAK-SHAPE"), Known("b", "y.py", 4, "d", "WAITED")])
    header, a, b, c = table_rows(runs, truth)
    assert header == ["project", "commit", "files", "analysed", "seconds", "HC001", "HC004", "problems", "peak MB",
                      "known found", "FP", "to judge"]  # fmt: skip
    assert a == ["a", "0123456789ab", "10", "2", "0.50", "1", "0", "0", "30", "1/1", "0", "0"]
    assert b == ["b", "-", "5", "1", "0.10", "0", "2", "1", "20", "-", "1", "1"]
    assert c[0] == "c" and "error: Traceback: boom" in c
    assert render_markdown([header, a]).splitlines()[1] == "|" + "---|" * len(header)


def test_the_commit_comes_from_the_manifest_then_git_then_nowhere(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    listed, checkout, plain = (corpus / name for name in ("listed", "checkout", "plain"))
    for project in (listed, checkout, plain):
        write(project / "m.py", "x = 1\n")
    write(corpus / "MANIFEST.tsv", "project\trepo\tcommit\tfiles\tpython_files\nlisted\tgithub:o/r\tabc123\t1\n")
    git = ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    manifest = read_manifest(corpus)
    assert [commit_of(p, manifest) for p in (listed, checkout, plain)] == ["abc123", head, "-"]


def test_projects_are_the_visible_directories_and_unknown_names_are_refused(tmp_path: Path) -> None:
    for name in ("b", "A", ".wheels"):
        (tmp_path / name).mkdir()
    write(tmp_path / "MANIFEST.tsv", "project\tcommit\n")
    assert [p.name for p in projects_in(tmp_path, [])] == ["A", "b"]
    with pytest.raises(CorpusError, match="no project nope"):
        projects_in(tmp_path, ["nope"])


def test_a_corpus_that_is_not_a_directory_is_one_line_and_status_2(tmp_path: Path, capsys) -> None:
    assert main([str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.strip() == f"lint_corpus: error: {tmp_path / 'missing'}: not a directory"


def test_a_real_run_finds_the_known_leak_and_nothing_in_the_fixed_project(tmp_path: Path, capsys) -> None:
    corpus = tmp_path / "corpus"
    write(corpus / "leaky" / "pkg" / "cache.py", SGLANG_0_5_14)
    write(corpus / "fixed" / "pkg" / "cache.py", SGLANG_0_5_15)
    isend = line_of(SGLANG_0_5_14, "torch.distributed.isend(")
    truth = write(tmp_path / "truth.tsv", TRUTH_HEADER + f"leaky\tpkg/cache.py\t{isend}\tattribute\tLEAK-SHAPE\t-\n")
    assert main([str(corpus), "--json", "--truth", str(truth)]) == 0
    data = json.loads(capsys.readouterr().out)
    runs = {p["project"]: p for p in data["projects"]}
    hc001 = [(f["file"], f["line"]) for f in runs["leaky"]["findings"] if f["rule"] == "HC001"]
    assert hc001 == [("pkg/cache.py", isend)]
    assert runs["fixed"]["findings"] == [] and runs["fixed"]["analysed"] == 1
    assert runs["leaky"]["peak_rss_mb"] > 0
    assert [m["site"]["line"] for m in data["truth"]["found"]] == [isend] and data["truth"]["missed"] == []


def test_work_sites_are_found_by_shape_apart_from_the_engine(tmp_path: Path) -> None:
    write(
        tmp_path / "p" / "m.py",
        "import torch.distributed as dist\n"
        "def f(pg, t, flag):\n"
        "    dist.isend(t, 1)\n"
        "    dist.all_reduce(t, async_op=flag)\n"
        "    dist.all_reduce(t, async_op=False)\n"
        "    pg.send([t], 1, 0)\n"
        "    pg.alltoall_base(t, t, [], [])\n"
        "    dist._reduce_scatter_base(t, t)\n"
        "    sock.send(b'x')\n",
    )
    assert [(s.line, s.api) for s in work_sites(tmp_path / "p")] == [
        (3, "isend"),
        (4, "all_reduce(async_op=...)"),
        (6, ".send(...)"),
        (7, ".alltoall_base(...)"),
    ]


def test_delete_wait_removes_the_wait_on_that_line_only() -> None:
    source = "for w in works:\n    w.wait()\npg.recv([t], 0).wait(timeout)\n"
    assert delete_wait(source, 2) == "for w in works:\n    pass\npg.recv([t], 0).wait(timeout)\n"
    assert delete_wait(source, 3) == "for w in works:\n    w.wait()\npg.recv([t], 0)\n"
    with pytest.raises(CorpusError):
        delete_wait(source, 1)


def test_a_deleted_wait_is_caught_as_a_regression(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The real script on a one-project corpus: the drain's wait deleted, HC001 appears."""
    write(tmp_path / "corpus" / "cache" / "hiradix.py", SGLANG_0_5_15)
    wait = line_of(SGLANG_0_5_15, "work.wait()")
    assert main([str(tmp_path / "corpus"), "--delete-wait", f"cache:hiradix.py:{wait}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CAUGHT  cache:hiradix.py:") and "regressions caught: 1/1" in out
