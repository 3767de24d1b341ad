"""The `hicache` entry point: commands are registered here; errors become messages here."""

from __future__ import annotations

import sys

import typer

from hicache_cli.cli import conventions
from hicache_cli.cli.commands import report, report_build
from hicache_cli.cli.commands.attach import attach
from hicache_cli.cli.commands.check import check
from hicache_cli.cli.commands.compare import compare_policies
from hicache_cli.cli.commands.doctor import doctor
from hicache_cli.cli.commands.lint import lint
from hicache_cli.cli.commands.sglang_scan import sglang_scan
from hicache_cli.cli.commands.stress import stress
from hicache_cli.cli.commands.trace import trace
from hicache_cli.cli.commands.watch import watch
from hicache_cli.cli.epilogs import ATTACH_EXAMPLES, LINT_EXAMPLES, STRESS_EXAMPLES, TRACE_EXAMPLES
from hicache_cli.errors import HicacheError, ReportNotWritten
from hicache_cli.lifecycle import STOPS
from hicache_cli.present.progress import inert, verdict_lines

app = typer.Typer(
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion, as typer offers them
    pretty_exceptions_enable=False,
)


ROOT_HELP = (
    "Reproduce, explain and gate the HiCache PP-sync host-memory leak.\n\n"
    "Under pipeline parallelism HiCache's PP sync isends a count every scheduler round and "
    "keeps the Work in a list; on gloo nothing frees it unless wait() is called. "
    "`hicache stress` runs that for real with torchrun and measures every rank."
)


@app.callback(help=ROOT_HELP)
def root(version: bool = conventions.VERSION) -> None:
    """The command group; each command is its own module under hicache_cli/cli/commands."""


app.command(epilog=STRESS_EXAMPLES)(stress)
# Everything after the first argument of the program is the program's, not ours.
app.command(epilog=TRACE_EXAMPLES, context_settings={"allow_interspersed_args": False})(trace)
app.command(epilog=ATTACH_EXAMPLES)(attach)
app.command()(watch)
app.command(context_settings={"allow_interspersed_args": False})(check)
app.command(name="compare-policies")(compare_policies)
app.command()(doctor)
app.command(name="sglang-scan")(sglang_scan)
app.command(epilog=LINT_EXAMPLES)(lint)
report.app.command("build")(report_build.build)  # its own module: a command imports no other
app.add_typer(report.app, name="report")


def main(argv: list[str] | None = None) -> int:
    STOPS.install()  # SIGTERM and SIGHUP stop a run as Ctrl-C does
    try:
        conventions.plain_help(typer.main.get_command(app))(args=argv, prog_name="hicache")
    except HicacheError as exc:
        if isinstance(exc, ReportNotWritten):  # the run's verdict first: the report that holds it is lost
            for line in verdict_lines(exc.report):
                print(inert(line))
        print(f"hicache: error: {inert(str(exc))}", file=sys.stderr)  # it may name a program's own names
        return exc.exit_code
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code == TYPER_INTERRUPTED and STOPS.signal:  # typer's answer to a KeyboardInterrupt
            print(f"hicache: stopped by {STOPS.signal}", file=sys.stderr)
            return STOPS.exit_code()
        return code
    finally:
        STOPS.restore()
    return 0


TYPER_INTERRUPTED = 130  # typer turns a KeyboardInterrupt outside a run into this exit


if __name__ == "__main__":
    sys.exit(main())
