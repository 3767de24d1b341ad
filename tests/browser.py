"""A real browser for tests: headless Chromium driven over the DevTools protocol through a
pipe (`--remote-debugging-pipe`: fd 3 takes commands, fd 4 gives answers, each a JSON
message ended by a NUL byte), so nothing beyond the standard library and a `chromium`
binary is needed. It opens a page with every request intercepted, keeps what the console
said, and can evaluate script, move the pointer and take screenshots."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


def find_chromium() -> str | None:
    for name in CANDIDATES:
        if (path := shutil.which(name)) is not None:
            return path
    return None


class BrowserError(RuntimeError):
    pass


@dataclass
class PageLog:
    """What a page did: every request it tried (and those refused), what its console said."""

    requests: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Chromium:
    """One headless Chromium with one page (a flat DevTools session), closed on exit."""

    def __init__(self, binary: str, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="hicache-chromium-")
        to_browser, self._commands = os.pipe()
        self._answers, from_browser = os.pipe()
        # the child's ends well above 3 and 4, so that putting them there clobbers neither
        to_browser, from_browser = (_above(fd, 20) for fd in (to_browser, from_browser))

        # bash (dash takes single-digit descriptors only) puts the ends where --remote-debugging-pipe
        # looks for them, then execs chromium
        redirect = f'exec "$0" "$@" 3<&{to_browser} 4>&{from_browser} {to_browser}<&- {from_browser}>&-'
        self.process = subprocess.Popen(
            ["bash", "-c", redirect, binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=None if os.environ.get("HICACHE_BROWSER_DEBUG") else subprocess.DEVNULL,
            pass_fds=(to_browser, from_browser),
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        self.session: str | None = None
        self.target: str | None = None
        self.log = PageLog()
        self.page_url: str | None = None

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in (self._commands, self._answers):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    # -- the protocol ---------------------------------------------------------------
    def send(self, method: str, params: dict[str, Any] | None = None, session: bool = True) -> dict[str, Any]:
        """Send a command and wait for its answer, handling events that arrive meanwhile."""
        self._next_id += 1
        ident = self._next_id  # an event handled while waiting may send commands of its own
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session and self.session is not None:
            message["sessionId"] = self.session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read(deadline)
            if reply.get("id") == ident:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._event(reply)

    def wait_for(self, method: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s
        for i, event in enumerate(self._events):
            if event.get("method") == method:
                return self._events.pop(i)
        while True:
            message = self._read(deadline)
            if message.get("method") == method:
                self._event(message, keep=False)
                return message
            self._event(message)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._answers], [], [], left)[0]:
                raise BrowserError("chromium did not answer in time")
            chunk = os.read(self._answers, 1 << 16)
            if not chunk:
                raise BrowserError("chromium closed its pipe (did it start?)")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(line)

    def _event(self, message: dict[str, Any], keep: bool = True) -> None:
        if message.get("sessionId") != self.session:
            return  # the browser's own, or a page opened before this one
        method, params = message.get("method"), message.get("params", {})
        if method == "Fetch.requestPaused":
            url = params["request"]["url"]
            if url == self.page_url:
                self.send("Fetch.continueRequest", {"requestId": params["requestId"]})
            else:
                self.log.refused.append(url)
                self.send("Fetch.failRequest", {"requestId": params["requestId"], "errorReason": "BlockedByClient"})
        elif method == "Network.requestWillBeSent":
            self.log.requests.append(params["request"]["url"])
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
            self.log.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            self.log.errors.append(params["exceptionDetails"].get("text", "exception"))
        elif method == "Log.entryAdded" and params["entry"].get("level") in ("error", "warning"):
            self.log.errors.append(params["entry"].get("text", ""))
        if keep and method is not None:
            self._events.append(message)

    # -- what a test does -----------------------------------------------------------
    def open(self, path: Path, width: int = 1366, height: int = 900) -> PageLog:
        """Open `path` in a fresh page, every request intercepted (only the page itself may
        load), and wait for its load event."""
        if self.target is not None:
            self.send("Target.closeTarget", {"targetId": self.target}, session=False)
        self.page_url, self.log, self._events = path.resolve().as_uri(), PageLog(), []
        self.target = target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)[
            "sessionId"
        ]
        for method in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"):
            self.send(method)
        self.send("Fetch.enable", {"patterns": [{"urlPattern": "*"}]})
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        self.send("Page.navigate", {"url": self.page_url})
        self.wait_for("Page.loadEventFired")
        return self.log

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def move_pointer(self, x: float, y: float) -> None:
        self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})

    def screenshot(self, out: Path, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params |= {"captureBeyondViewport": True, "clip": {**_box(size), "scale": 1}}
        out.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", params)["data"]))
        return out

    def pdf(self) -> bytes:
        return base64.b64decode(self.send("Page.printToPDF", {"printBackground": True})["data"])


def _above(fd: int, lowest: int) -> int:
    """`fd` moved to the lowest free descriptor >= `lowest`."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, lowest)
    os.close(fd)
    return moved


def _box(size: dict[str, float]) -> dict[str, float]:
    return {"x": 0, "y": 0, "width": size["width"], "height": size["height"]}
