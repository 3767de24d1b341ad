"""`# hicache: ignore[HC001]` (or `[HC001,HC003]`, or a bare `# hicache: ignore` for every rule)
on any line of the call or statement a finding points at silences it there."""

from __future__ import annotations

import io
import re
import tokenize

MARK = "hicache: ignore"
_COMMENT = re.compile(r"#\s*hicache:\s*ignore(?:\[(?P<rules>[^\]]*)\])?")
ALL = frozenset({"*"})


def suppressions(source: bytes) -> dict[int, frozenset[str]]:
    """Line -> the rule ids silenced on it (ALL for a bare ignore). Read with tokenize, so a
    `#` inside a string is not a comment; a file that does not tokenize has none."""
    if MARK.encode() not in source:
        return {}
    found: dict[int, frozenset[str]] = {}
    try:
        for token in tokenize.tokenize(io.BytesIO(source).readline):
            if token.type != tokenize.COMMENT:
                continue
            match = _COMMENT.search(token.string)
            if match is None:
                continue
            rules = match.group("rules")
            ids = ALL if rules is None else frozenset(r.strip().upper() for r in rules.split(",") if r.strip())
            found[token.start[0]] = found.get(token.start[0], frozenset()) | ids
    except (tokenize.TokenError, SyntaxError):
        return found
    return found


def is_suppressed(table: dict[int, frozenset[str]], rule: str, first: int, last: int) -> bool:
    for line in range(first, last + 1):
        ids = table.get(line)
        if ids is not None and (ids == ALL or "*" in ids or rule in ids):
            return True
    return False
