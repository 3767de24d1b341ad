"""The document around a page's body: one HTML file that needs nothing else. Its style and
script are inline, and a Content-Security-Policy allows those two (by hash) and nothing
more: no request can leave the page, and markup a report might smuggle in cannot run."""

from __future__ import annotations

import base64
import hashlib
from functools import cache
from importlib import resources

from hicache_cli.analysis.bundles import Bundle
from hicache_cli.analysis.results import Report
from hicache_cli.present.html.bundle import bundle_body, bundle_title
from hicache_cli.present.html.markup import esc
from hicache_cli.present.html.run import run_body, title
from hicache_cli.version import __version__

# In the page's first bytes: how `report html` knows a file it may write over is a page it wrote.
GENERATOR = "hicache report html"


@cache
def asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def document(page_title: str, body: str) -> str:
    style, script = asset("page.css"), asset("page.js")
    policy = (
        f"default-src 'none'; style-src {_sha256(style)}; script-src {_sha256(script)}; "
        "img-src 'none'; base-uri 'none'; form-action 'none'"
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta name="generator" content="{GENERATOR} {esc(__version__)}">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(page_title)}</title>\n<style>{style}</style>\n</head>\n<body>\n"
        f'{body}\n<div id="tip" role="status" aria-live="polite" hidden></div>\n'
        f'<footer><p class="note">Drawn by hicache {esc(__version__)} from the report alone: '
        "this file makes no network request.</p></footer>\n"
        f"<script>{script}</script>\n</body>\n</html>\n"
    )


def render(doc: Report | Bundle) -> str:
    """The page of a run's report, or of a compare-policies or sglang-scan bundle."""
    if isinstance(doc, Bundle):
        return document(bundle_title(doc), bundle_body(doc))
    return document(f"hicache: {title(doc)}: {doc.verdict}", run_body(doc))
