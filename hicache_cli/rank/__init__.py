"""Rank side: what runs inside each torchrun rank (the entry point, the probe that samples
it). Never imports rich or typer."""
