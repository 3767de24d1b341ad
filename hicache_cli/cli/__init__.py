"""The command line: typer app and one module per command, thin wrappers over the library."""
