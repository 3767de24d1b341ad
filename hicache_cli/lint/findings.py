"""What linting returns: findings (with columns, both ends, and the other places they name),
the inputs that could not be read, and how much was read."""

from __future__ import annotations

from dataclasses import dataclass, field

from hicache_cli.lint.suppress import Suppressions


@dataclass(frozen=True, order=True, slots=True)
class Related:
    """Another place a finding names: where its Work is kept, where it is only polled."""

    file: str
    line: int
    column: int  # 1-based, as editors and SARIF count
    message: str  # what happens there: "kept in self.work_list", "polled with is_completed()"


@dataclass(frozen=True, order=True, slots=True)
class Finding:
    """One rule's finding. `line`/`column` is where it points (the Work's creation, for HC001),
    `end_line`/`end_column` the end of that call or statement; `related` the other places it
    names (SARIF relatedLocations)."""

    file: str  # as shown to the user: relative to the working directory when under it
    line: int
    rule: str
    function: str  # qualified: `HiRadixCache._pp_sync`, or `<module>`
    message: str
    end_line: int = 0  # the last line of the statement or call the finding points at; 0: `line`
    column: int = 0  # 1-based; 0: not known
    end_column: int = 0  # 1-based, inclusive of the last character; 0: not known
    related: tuple[Related, ...] = ()
    level: str = ""  # SARIF level when it differs from the rule's default ("note": downgraded)

    @property
    def last_line(self) -> int:
        return max(self.line, self.end_line)

    def silenced_by(self, table: Suppressions) -> bool:
        """Whether a `# hicache: ignore[...]` comment on any line the finding spans silences it."""
        return table.silences(self.rule, self.line, self.last_line)


@dataclass(frozen=True)
class InputProblem:
    """A target that could not be linted (it does not exist, is not Python, does not parse), or,
    as a warning, an entry of a directory that was skipped (a FIFO, a symlink loop)."""

    target: str
    reason: str

    def __str__(self) -> str:
        return f"{self.target}: {self.reason}"


@dataclass(frozen=True, order=True, slots=True)
class Followed:
    """A call the analysis followed as a Work site: `work` (it makes an asynchronous Work),
    `sync` (a collective whose async_op no True reaches: taken as blocking), `none` (a collective
    queued by a coalescing manager: no Work of its own), or `call` (a call of the program's own
    function or method, followed into it). For measuring what the analysis
    follows on real code (scripts/lint_corpus.py --sites); not part of any output format."""

    file: str
    line: int
    end_line: int
    kind: str  # work | sync | none | call
    api: str


@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)  # the rules that ran, by id
    problems: list[InputProblem] = field(default_factory=list)  # targets that could not be read: exit 2
    warnings: list[InputProblem] = field(default_factory=list)  # entries skipped in a directory: no exit change
    files: int = 0  # files looked at (read, and parsed when they could hold a finding)
    parsed: int = 0  # files parsed and analysed
    suppressed: int = 0  # findings silenced by `# hicache: ignore[...]`
    seconds: float = 0.0
    followed: list[Followed] = field(default_factory=list)  # the Work sites the analysis followed
