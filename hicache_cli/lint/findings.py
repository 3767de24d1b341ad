"""What linting returns: findings, the inputs that could not be read, and how much was read."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class Finding:
    """One rule's finding. `line` is where the finding points (the Work's creation, for HC001)."""

    file: str  # as shown to the user: relative to the working directory when under it
    line: int
    rule: str
    function: str  # qualified: `HiRadixCache._pp_sync`, or `<module>`
    message: str
    end_line: int = 0  # the last line of the statement or call the finding points at; 0: `line`

    @property
    def last_line(self) -> int:
        return max(self.line, self.end_line)


@dataclass(frozen=True)
class InputProblem:
    """A target that could not be linted: it does not exist, is not Python, does not parse."""

    target: str
    reason: str

    def __str__(self) -> str:
        return f"{self.target}: {self.reason}"


@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)  # the rules that ran, by id
    problems: list[InputProblem] = field(default_factory=list)
    files: int = 0  # files looked at (read, and parsed when they could hold a finding)
    parsed: int = 0  # files parsed and analysed
    suppressed: int = 0  # findings silenced by `# hicache: ignore[...]`
    seconds: float = 0.0
