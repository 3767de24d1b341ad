"""Presentation: the dashboard, progress lines, tables, plots and JUnit. Imports no torch."""
