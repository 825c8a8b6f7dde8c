"""A small headless-Chromium driver over the DevTools protocol: open a page, click by text, read it, screenshot."""

from __future__ import annotations

import base64
import itertools
import json
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from websockets.sync.client import connect

from tests.support import free_port

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


class Browser:
    """One Chromium process and one page, driven over CDP; window: its width and height in pixels."""

    def __init__(self, chromium: str, window: tuple[int, int] = (1400, 1000)):
        self.port = free_port()
        self.profile = tempfile.mkdtemp(prefix="ferry-chromium-")
        debugging = [f"--remote-debugging-port={self.port}", f"--user-data-dir={self.profile}"]
        self.proc = subprocess.Popen(
            [chromium, *FLAGS, f"--window-size={window[0]},{window[1]}", *debugging, "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._ids = itertools.count(1)
        deadline = time.monotonic() + 90  # a loaded machine (the suite runs on every core) starts it slowly
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=1) as response:
                    pages = [t for t in json.load(response) if t["type"] == "page"]
                if pages:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("chromium's DevTools endpoint did not come up")
            time.sleep(0.2)
        self.ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=None)

    def call(self, method: str, **params) -> dict:
        ident = next(self._ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def wait_for_text(self, text: str, timeout_s: float = 30.0) -> bool:
        """True once the page's text holds text, whitespace aside: a person reads "name Completed" where the page
        lays the two out on lines or in table cells of their own."""
        wanted = " ".join(text.split())
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if wanted in " ".join((self.evaluate("document.body ? document.body.innerText : ''") or "").split()):
                return True
            time.sleep(0.3)
        return False

    def _on_text(self, text: str, call: str) -> bool:
        """Make the method call (JavaScript) on the innermost element whose own text is exactly text; False if none
        is."""
        return bool(
            self.evaluate(
                "(() => { const els = [...document.querySelectorAll('button, a, [role=tab], li, span, div, h1, h2, h3, "
                f"h4, h5, h6')].filter(e => e.textContent.trim() === {json.dumps(text)});"
                f" const el = els[els.length - 1]; if (el) {{ el.{call}; return true; }} return false; }})()"
            )
        )

    def click_text(self, text: str) -> bool:
        """Click the innermost element whose own text is exactly text."""
        return self._on_text(text, "click()")

    def scroll_to_text(self, text: str) -> bool:
        """Scroll the innermost element whose own text is exactly text into view (no further than that): a list
        that renders only what is in view (Prefect's artifact grids) shows what follows it."""
        return self._on_text(text, "scrollIntoView({block: 'nearest'})")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=10)
