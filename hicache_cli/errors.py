"""The user-facing error hierarchy. Only the entry point turns these into messages and exit codes."""

from __future__ import annotations

from typing import Any


class HicacheError(Exception):
    exit_code = 1


class UsageError(HicacheError):
    """Bad input: options, files, ports, directories."""

    exit_code = 2


class ReportNotWritten(UsageError):
    """The run ended and its verdict was reached, but report.json could not be written (a full
    disk, say): the entry point prints the verdict before the error, so it is never lost."""

    def __init__(self, message: str, report: Any) -> None:
        super().__init__(message)
        self.report = report  # analysis.report.Report (typed loosely: this module imports nothing)


class AttachRefused(UsageError):
    """hicache attach cannot attach to a process: no debugger, no permission, not a Python
    process with a process group, a pid that does not exist (one line, exit 2)."""


class RunFailed(HicacheError):
    """The run itself failed (a rank crashed or hung) or no verdict could be reached."""

    exit_code = 3


# Exit codes, stable and documented in docs/commands.md.
EXIT_OK = 0
EXIT_FINDING = 1
EXIT_USAGE = UsageError.exit_code
EXIT_RUN_FAILED = RunFailed.exit_code
EXIT_INTERRUPTED = 130
