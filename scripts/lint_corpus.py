"""Lint a directory of checkouts with `hicache lint`, one project per subdirectory, and tabulate.

    .venv/bin/python scripts/lint_corpus.py CORPUS [--select all] [--project NAME]... [--truth GROUND_TRUTH.tsv]
    .venv/bin/python scripts/lint_corpus.py CORPUS --json > run.json
    .venv/bin/python scripts/lint_corpus.py CORPUS --markdown        # the table for docs/lint.md
    .venv/bin/python scripts/lint_corpus.py CORPUS --sites           # which Work sites the analysis follows
    .venv/bin/python scripts/lint_corpus.py CORPUS --delete-wait PROJECT:FILE:LINE ...   # regressions caught

CORPUS holds one directory per project: a checkout, an unpacked wheel, any tree of .py files
(hidden directories are skipped). A project's commit comes from CORPUS/MANIFEST.tsv (a header
line, then tab-separated `project repo commit ...`) when it lists the project, else from `git
rev-parse HEAD` in a git checkout, else `-`. Each project is linted in a process of its own,
so its peak RSS is its own and an engine crash in one project is reported while the others go
on.

With --truth (a TSV with a header naming at least `project file line shape judgement`; file
relative to the project directory, judgement LEAK-SHAPE, WAITED, DROPPED or NOT-A-WORK), each
finding is matched to the known site whose line its statement spans: LEAK-SHAPE sites found or
missed, findings on WAITED / NOT-A-WORK sites (false positives: the Work is waited, or is no
Work), HC001 on a DROPPED site (not kept: a false positive too), other findings on DROPPED sites
(HC003/HC004 ground: judge by reading), and findings on no known site (to be judged).

With --sites, an AST pass of its own (not the engine's) lists every call that can create a Work -
a name or method `isend`/`irecv`/`batch_isend_irecv`, any call given `async_op=` other than the
literal False, a ProcessGroup-only method (`x.allreduce(...)`, `x.alltoall_base(...)`) or a
ProcessGroup-style call with a list of tensors (`x.send([t], dst, tag)`) - and counts those the
analysis followed: as a Work (asynchronous or not), or as a call of the program's own function it
followed into. The rest are printed, to be judged (a Work the analysis cannot follow, or no Work).

With --delete-wait PROJECT:FILE:LINE (repeatable), the project is copied below the system's
temporary directory, the `.wait(...)` on that line is deleted (a statement of its own becomes
`pass`), and the copy is linted: the regression is caught when an HC001, HC004 or HC005 finding appears
that the unchanged project does not have.
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

JUDGEMENTS = ("LEAK-SHAPE", "WAITED", "DROPPED", "NOT-A-WORK")


class CorpusError(Exception):
    """Bad input: reported as one line and exit status 2."""


@dataclass(frozen=True, order=True)
class Found:
    """One finding, its file relative to the project directory."""

    file: str
    line: int
    end_line: int
    rule: str
    message: str


@dataclass(frozen=True, order=True)
class WorkSite:
    """A call that can make a Work (or that the analysis followed as one)."""

    file: str
    line: int
    end_line: int
    kind: str  # the engine's: work | sync | call; the AST pass's: candidate
    api: str


@dataclass
class ProjectRun:
    project: str
    commit: str = "-"
    files: int = 0
    analysed: int = 0
    seconds: float = 0.0
    peak_rss_mb: float = 0.0
    problems: int = 0
    findings: list[Found] = field(default_factory=list)
    error: str = ""  # the engine failed on this project: the last line it wrote
    followed: list[WorkSite] = field(default_factory=list)  # what the analysis followed (--sites)
    candidates: list[WorkSite] = field(default_factory=list)  # what the AST pass found (--sites)


@dataclass(frozen=True)
class Known:
    project: str
    file: str
    line: int
    shape: str
    judgement: str


@dataclass
class TruthReport:
    found: list[tuple[Known, Found]] = field(default_factory=list)  # LEAK-SHAPE sites with a finding
    missed: list[Known] = field(default_factory=list)  # LEAK-SHAPE sites with none
    false_positives: list[tuple[Known, Found]] = field(default_factory=list)
    to_judge_known: list[tuple[Known, Found]] = field(default_factory=list)  # HC003/HC004 on DROPPED sites
    not_in_truth: list[tuple[str, Found]] = field(default_factory=list)  # (project, finding)


# ---------------------------------------------------------------- the engine (the only place it is used)
def lint_tree(root: Path, select: list[str] | None) -> ProjectRun:
    """Lint every .py file below `root` with hicache's lint API. Everything this script knows of
    the engine is in this function: `lint(targets, select)` returning a result with `findings`
    (`file`, `line`, `rule`, `message`, optionally `end_line`), `files`, `parsed`, `seconds`,
    `problems`."""
    from hicache_cli.lint.engine import lint

    result = lint([str(root)], select)
    findings = [
        Found(_relative(f.file, root), f.line, max(f.line, getattr(f, "end_line", 0) or 0), f.rule, f.message)
        for f in result.findings
    ]
    followed = [
        WorkSite(_relative(s.file, root), s.line, s.end_line, s.kind, s.api) for s in getattr(result, "followed", [])
    ]
    return ProjectRun(
        root.name,
        files=result.files,
        analysed=result.parsed,
        seconds=round(result.seconds, 2),
        problems=len(result.problems),
        findings=sorted(findings),
        followed=sorted(set(followed)),
    )


def _relative(file: str, root: Path) -> str:
    path = Path(file)
    if not path.is_absolute():
        path = Path.cwd() / path
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return file


# ---------------------------------------------------------------- Work sites, found apart from the engine
P2P_NAMES = frozenset({"isend", "irecv", "batch_isend_irecv"})
PG_ONLY = frozenset(
    {
        *("allreduce", "allreduce_coalesced", "allgather", "allgather_coalesced", "allgather_into_tensor_coalesced"),
        *("_allgather_base", "alltoall", "alltoall_base", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced"),
        "recv_anysource",
    }
)
PG_LISTED = frozenset({"send", "recv", "broadcast", "reduce", "reduce_scatter", "gather", "scatter"})


def work_sites(root: Path) -> list[WorkSite]:
    """Every call below `root` that can make a Work, by its shape alone (the module docstring)."""
    found: list[WorkSite] = []
    for path in sorted(root.rglob("*.py")):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        try:
            tree = ast.parse(path.read_bytes(), str(path))
        except (SyntaxError, ValueError, OSError, RecursionError):
            continue
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (api := _work_api(node)) is not None:
                found.append(WorkSite(rel, node.lineno, node.end_lineno or node.lineno, "candidate", api))
    return found


def _work_api(call: ast.Call) -> str | None:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name in P2P_NAMES:
        return name
    given = next((k.value for k in call.keywords if k.arg == "async_op"), None)
    if given is not None and not (isinstance(given, ast.Constant) and given.value is False):
        return f"{name or '<value>'}(async_op=...)"
    if (
        isinstance(func, ast.Attribute)
        and not _is_dist(func.value)
        and (name in PG_ONLY or (name in PG_LISTED and call.args and isinstance(call.args[0], ast.List)))
    ):
        return f".{name}(...)"
    return None


def _is_dist(expr: ast.expr) -> bool:
    """`torch.distributed`, `dist`, `c10d`: a module's function (`dist._reduce_scatter_base(...)`,
    blocking unless given async_op), not a ProcessGroup's method."""
    text = ast.unparse(expr)
    return text in ("dist", "c10d", "distributed_c10d") or text.endswith(".distributed")


def site_counts(run: ProjectRun) -> tuple[Counter[str], list[WorkSite]]:
    """How the candidates were followed (work, sync, call, not followed), and those not followed."""
    by_line: dict[tuple[str, int], list[str]] = {}
    for site in run.followed:
        by_line.setdefault((site.file, site.line), []).append(site.kind)
    counts: Counter[str] = Counter()
    missed = []
    for site in run.candidates:
        kinds = by_line.get((site.file, site.line), [])
        kind = next((k for k in ("work", "sync", "none", "call") if k in kinds), "not followed")
        counts[kind] += 1
        if kind == "not followed":
            missed.append(site)
    return counts, missed


def render_sites(runs: list[ProjectRun]) -> str:
    kinds = ("work", "sync", "none", "call", "not followed")
    rows = [["project", "sites", *kinds]]
    total: Counter[str] = Counter()
    missed_all = []
    for run in runs:
        counts, missed = site_counts(run)
        total.update(counts)
        missed_all += [(run.project, m) for m in missed]
        rows.append([run.project, str(len(run.candidates)), *(str(counts[k]) for k in kinds)])
    sites = sum(total.values())
    share = f" ({100 * total['not followed'] / sites:.1f}%)" if sites else ""
    rows.append(["all", str(sites), *(str(total[k]) for k in kinds)])
    rows[-1][-1] += share
    lines = [render_text(rows), "", "not followed:"]
    lines += [f"  {project}/{m.file}:{m.line}: {m.api}" for project, m in missed_all]
    return "\n".join(lines)


# ---------------------------------------------------------------- regressions: one wait deleted
def delete_wait(source: str, line: int) -> str:
    """The source with the `.wait(...)` on `line` gone: `x.wait()` alone becomes `pass`, and
    `f(...).wait(t)` becomes `f(...)`. Raises CorpusError when the line has no wait."""
    lines = source.splitlines(keepends=True)
    if not 0 < line <= len(lines) or ".wait(" not in lines[line - 1]:
        raise CorpusError(f"line {line} has no .wait(")
    text = lines[line - 1]
    body = text.strip()
    if re.fullmatch(r"[\w.\[\]]+\.wait\([^()]*\)", body):
        lines[line - 1] = text[: len(text) - len(text.lstrip())] + "pass\n"
    else:
        lines[line - 1] = re.sub(r"\.wait\([^()]*\)", "", text, count=1)
    return "".join(lines)


def regression(corpus: Path, spec: str, select: list[str] | None, timeout: float, base: dict[str, ProjectRun]) -> str:
    """Lint a copy of the project with one wait deleted; what it finds that the project does not."""
    try:
        project, file, line = spec.split(":")
        number = int(line)
    except ValueError:
        raise CorpusError(f"--delete-wait {spec!r}: not PROJECT:FILE:LINE") from None
    source = corpus / project / file
    if not source.is_file():
        raise CorpusError(f"--delete-wait {spec!r}: {source} is not a file")
    if project not in base:
        base[project] = run_project(corpus / project, select, timeout)
    before = {(f.file, f.line, f.rule) for f in base[project].findings}
    with tempfile.TemporaryDirectory(prefix="lint-regression-") as scratch:
        copy = Path(scratch) / project
        shutil.copytree(corpus / project, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        edited = delete_wait(source.read_text(encoding="utf-8", errors="replace"), number)
        (copy / file).write_text(edited, encoding="utf-8")
        after = run_project(copy, select, timeout)
    rules = ("HC001", "HC004", "HC005")
    new = [f for f in after.findings if (f.file, f.line, f.rule) not in before and f.rule in rules]
    verdict = "CAUGHT" if new else "missed"
    out = [f"{verdict}  {spec}"] + [f"    {f.file}:{f.line}: {f.rule} {f.message}" for f in new]
    return "\n".join(out)


# ---------------------------------------------------------------- one project in a process of its own
def _child(root: Path, select: list[str] | None, sites: bool) -> None:
    import resource

    run = lint_tree(root, select)
    run.peak_rss_mb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux
    if sites:
        run.candidates = work_sites(root)
    else:
        run.followed = []
    json.dump(asdict(run), sys.stdout)


def run_project(root: Path, select: list[str] | None, timeout: float, sites: bool = False) -> ProjectRun:
    command = [sys.executable, str(Path(__file__).resolve()), "--one", str(root)]
    if select:
        command += ["--select", ",".join(select)]
    if sites:
        command += ["--sites"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return ProjectRun(root.name, error=f"timed out after {timeout:g} s")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return ProjectRun(root.name, error=last)
    data = json.loads(done.stdout)
    data["findings"] = [Found(**f) for f in data["findings"]]
    data["followed"] = [WorkSite(**f) for f in data["followed"]]
    data["candidates"] = [WorkSite(**f) for f in data["candidates"]]
    return ProjectRun(**data)


# ---------------------------------------------------------------- inputs
def read_tsv(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CorpusError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    rows = list(csv.DictReader(text.splitlines(), delimiter="\t"))
    header = text.splitlines()[0].split("\t") if text.strip() else []
    missing = [c for c in required if c not in header]
    if missing:
        raise CorpusError(f"{path}: the header has no {', '.join(missing)} column")
    return rows


def read_manifest(corpus: Path) -> dict[str, str]:
    """project -> commit, from CORPUS/MANIFEST.tsv if there is one."""
    manifest = corpus / "MANIFEST.tsv"
    if not manifest.exists():
        return {}
    return {row["project"]: row["commit"] or "-" for row in read_tsv(manifest, ("project", "commit"))}


def commit_of(project: Path, manifest: dict[str, str]) -> str:
    if project.name in manifest:
        return manifest[project.name]
    if (project / ".git").exists():
        done = subprocess.run(["git", "-C", str(project), "rev-parse", "HEAD"], capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout.strip()
    return "-"


def read_truth(path: Path) -> list[Known]:
    known = []
    for number, row in enumerate(read_tsv(path, ("project", "file", "line", "shape", "judgement")), 2):
        try:
            line = int(row["line"])
        except ValueError:
            raise CorpusError(f"{path}:{number}: line is not a number: {row['line']!r}") from None
        if row["judgement"] not in JUDGEMENTS:
            raise CorpusError(f"{path}:{number}: judgement {row['judgement']!r} is none of {', '.join(JUDGEMENTS)}")
        known.append(Known(row["project"], row["file"], line, row["shape"], row["judgement"]))
    return known


def projects_in(corpus: Path, names: list[str]) -> list[Path]:
    if not corpus.is_dir():
        raise CorpusError(f"{corpus}: not a directory")
    found = sorted((p for p in corpus.iterdir() if p.is_dir() and not p.name.startswith(".")), key=_name_key)
    if not names:
        return found
    unknown = sorted(set(names) - {p.name for p in found})
    if unknown:
        raise CorpusError(f"{corpus}: no project {', '.join(unknown)}")
    return [p for p in found if p.name in names]


def _name_key(path: Path) -> str:
    return path.name.lower()


# ---------------------------------------------------------------- matching findings to the truth
def match_truth(runs: list[ProjectRun], known: list[Known]) -> TruthReport:
    """A finding is on a known site when it names the site's file and its statement's lines
    (line..end_line) span the site's line. Only the projects that ran are judged."""
    ran = {run.project for run in runs if not run.error}
    sites: dict[tuple[str, str], list[Known]] = {}
    for site in known:
        if site.project in ran:
            sites.setdefault((site.project, site.file), []).append(site)
    report = TruthReport()
    hit: set[Known] = set()
    for run in runs:
        for finding in run.findings:
            on = [s for s in sites.get((run.project, finding.file), []) if finding.line <= s.line <= finding.end_line]
            if not on:
                report.not_in_truth.append((run.project, finding))
            for site in on:
                hit.add(site)
                if site.judgement == "LEAK-SHAPE":
                    report.found.append((site, finding))
                elif site.judgement == "DROPPED" and finding.rule != "HC001":
                    report.to_judge_known.append((site, finding))
                else:
                    report.false_positives.append((site, finding))
    report.missed = [s for group in sites.values() for s in group if s.judgement == "LEAK-SHAPE" and s not in hit]
    return report


# ---------------------------------------------------------------- output
def rules_seen(runs: list[ProjectRun]) -> list[str]:
    return sorted({f.rule for run in runs for f in run.findings})


def table_rows(runs: list[ProjectRun], truth: TruthReport | None) -> list[list[str]]:
    """Header first. Per-rule counts for every rule that found something anywhere; with a truth,
    known LEAK-SHAPE sites found of those in the project, false positives and unjudged findings."""
    rules = rules_seen(runs)
    header = ["project", "commit", "files", "analysed", "seconds", *rules, "problems", "peak MB"]
    if truth is not None:
        header += ["known found", "FP", "to judge"]
    rows = [header]
    for run in runs:
        counts = Counter(f.rule for f in run.findings)
        if run.error:
            row = [run.project, _short(run.commit), "-", "-", "-", *["-"] * len(rules), f"error: {run.error}", "-"]
        else:
            row = [
                run.project,
                _short(run.commit),
                str(run.files),
                str(run.analysed),
                f"{run.seconds:.2f}",
                *[str(counts[r]) for r in rules],
                str(run.problems),
                f"{run.peak_rss_mb:.0f}",
            ]
        if truth is not None:
            row += _truth_cells(run.project, truth)
        rows.append(row)
    return rows


def _truth_cells(project: str, truth: TruthReport) -> list[str]:
    found = {k for k, _ in truth.found if k.project == project}
    known = len(found) + sum(1 for k in truth.missed if k.project == project)
    fp = sum(1 for k, _ in truth.false_positives if k.project == project)
    judge = sum(1 for k, _ in truth.to_judge_known if k.project == project)
    judge += sum(1 for p, _ in truth.not_in_truth if p == project)
    return [f"{len(found)}/{known}" if known else "-", str(fp), str(judge)]


def _short(commit: str) -> str:
    return commit[:12] if len(commit) == 40 and all(c in "0123456789abcdef" for c in commit) else commit


def render_text(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def render_markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return "\n".join(lines)


def render_truth(truth: TruthReport) -> str:
    def where(project: str, f: Found) -> str:
        return f"{project}/{f.file}:{f.line}: {f.rule} {f.message}"

    out = [f"known LEAK-SHAPE sites found: {len(truth.found)}"]
    out += [f"  found   {k.project}/{k.file}:{k.line} ({k.shape}) by {f.rule}" for k, f in truth.found]
    out.append(f"known LEAK-SHAPE sites missed: {len(truth.missed)}")
    out += [f"  missed  {k.project}/{k.file}:{k.line} ({k.shape})" for k in truth.missed]
    out.append(f"findings on known WAITED / NOT-A-WORK / DROPPED sites (false positives): {len(truth.false_positives)}")
    out += [f"  FP      {where(k.project, f)}  [{k.judgement}: {k.shape}]" for k, f in truth.false_positives]
    out.append(f"findings on known DROPPED sites (HC003/HC004: judge): {len(truth.to_judge_known)}")
    out += [f"  judge   {where(k.project, f)}" for k, f in truth.to_judge_known]
    out.append(f"findings not in the truth (to be judged): {len(truth.not_in_truth)}")
    out += [f"  judge   {where(p, f)}" for p, f in truth.not_in_truth]
    return "\n".join(out)


def to_json(corpus: Path, runs: list[ProjectRun], truth: TruthReport | None) -> str:
    data: dict[str, object] = {"schema_version": 1, "corpus": str(corpus), "projects": [asdict(r) for r in runs]}
    if truth is not None:
        data["truth"] = {
            "found": [{"site": asdict(k), "finding": asdict(f)} for k, f in truth.found],
            "missed": [asdict(k) for k in truth.missed],
            "false_positives": [{"site": asdict(k), "finding": asdict(f)} for k, f in truth.false_positives],
            "to_judge_known": [{"site": asdict(k), "finding": asdict(f)} for k, f in truth.to_judge_known],
            "not_in_truth": [{"project": p, "finding": asdict(f)} for p, f in truth.not_in_truth],
        }
    return json.dumps(data, indent=1)


# ---------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpus", nargs="?", type=Path, help="a directory with one subdirectory per project")
    parser.add_argument("--select", action="append", help="rules, as hicache lint --select (default: its defaults)")
    parser.add_argument("--project", action="append", default=[], help="only this project (repeatable)")
    parser.add_argument("--truth", type=Path, help="a ground-truth TSV: project, file, line, shape, judgement")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per project (default 1800)")
    parser.add_argument("--sites", action="store_true", help="count the Work sites the analysis follows")
    parser.add_argument(
        "--delete-wait", action="append", default=[], metavar="PROJECT:FILE:LINE", help="lint with that wait deleted"
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print JSON instead of the table")
    output.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # internal: lint one project, print JSON
    args = parser.parse_args(argv)
    if args.one is None and args.corpus is None:
        parser.error("the corpus directory is required")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    select = [part for item in args.select for part in item.split(",") if part] if args.select else None
    if args.one is not None:
        _child(args.one, select, args.sites)
        return 0
    if args.delete_wait:
        base: dict[str, ProjectRun] = {}
        try:
            reports = [regression(args.corpus, spec, select, args.timeout, base) for spec in args.delete_wait]
        except CorpusError as exc:
            print(f"lint_corpus: error: {exc}", file=sys.stderr)
            return 2
        print("\n".join(reports))
        caught = sum(r.startswith("CAUGHT") for r in reports)
        print(f"\nregressions caught: {caught}/{len(reports)}")
        return 0
    try:
        known = read_truth(args.truth) if args.truth else None
        manifest = read_manifest(args.corpus)
        projects = projects_in(args.corpus, args.project)
    except CorpusError as exc:
        print(f"lint_corpus: error: {exc}", file=sys.stderr)
        return 2
    runs = []
    for project in projects:
        print(f"lint_corpus: {project.name}", file=sys.stderr, flush=True)
        run = run_project(project, select, args.timeout, args.sites)
        run.commit = commit_of(project, manifest)
        runs.append(run)
    truth = match_truth(runs, known) if known is not None else None
    if args.json:
        print(to_json(args.corpus, runs, truth))
    else:
        rows = table_rows(runs, truth)
        print(render_markdown(rows) if args.markdown else render_text(rows))
        total = sum(len(r.findings) for r in runs)
        print(f"\n{len(runs)} projects, {sum(r.files for r in runs)} files, {total} findings")
        if truth is not None:
            print("\n" + render_truth(truth))
        if args.sites:
            print("\n" + render_sites(runs))
    return 1 if any(r.error for r in runs) else 0


if __name__ == "__main__":
    REPO = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(REPO))  # hicache_cli from this checkout when run as a file
    sys.exit(main())
