"""Analysis: pure functions over samples and reports (statistics, verdicts, the gate, the
report itself). Imports neither rich nor torch."""
