"""GitHub Actions workflow commands (`::error title=...::message`) escaped as the runner
requires. Stdlib only: `hicache check` and `hicache lint` (which never loads rich) share it."""

from __future__ import annotations


def escape_data(text: str) -> str:
    """A workflow command's message: %, CR and LF are the runner's own syntax."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property (`title=...`): the message's escapes, and `:` and `,`,
    which end a property."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")
