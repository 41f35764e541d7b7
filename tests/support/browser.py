"""A local HTML page opened in headless Chromium with the network off, and what it showed.

Used by the page tests (report.html, compare.html): Chromium is Debian's ``chromium`` package
(``make test`` installs it; ``CHROMIUM`` names another binary), driven over the DevTools
protocol with aiohttp's websocket client, which is reliable where scraping Chromium's log
for console lines is not. :func:`open_page` loads the page, waits for its load event, and
returns its console errors (``console.error``, uncaught exceptions, and the browser's own
error log: a refused fetch, a Content-Security-Policy violation), every URL it requested
besides itself, its text, each inline SVG figure's size and element count, and screenshots.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--remote-debugging-port=0",
)  # fmt: skip
WIDTH, HEIGHT = 1400, 1000
#: Browser log sources that are about the browser, not the page (none expected offline).
_IGNORED_LOG_SOURCES = ("intervention",)


def find_chromium() -> str | None:
    """The Chromium binary: ``$CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH."""
    named = os.environ.get("CHROMIUM")
    if named:
        return named
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)


@dataclass
class PageView:
    """What the page did and showed.

    Attributes:
        errors: console errors, uncaught exceptions and browser error-log lines.
        requests: URLs requested other than the page itself (``data:`` ones left out).
        text: the page's visible text (``document.body.innerText``).
        figures: per inline ``<svg>`` in a figure: ``id``, ``width``, ``height`` (CSS px)
            and ``elements`` (drawn elements: paths, uses, texts, lines).
        titles: hover texts (``<title>`` of SVG elements), in document order.
        screenshots: name → PNG path (``top``: the first screen; ``full``: the whole page).
        result: what the ``script`` given to :func:`open_page` returned (JSON), if any.
    """

    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    text: str = ""
    figures: list[dict[str, Any]] = field(default_factory=list)
    titles: list[str] = field(default_factory=list)
    screenshots: dict[str, Path] = field(default_factory=dict)
    result: Any = None


_INSPECT = """(() => {
  const figures = Array.from(document.querySelectorAll("figure .plot svg")).map(svg => {
    const box = svg.getBoundingClientRect();
    return {id: svg.closest("figure").id, width: box.width, height: box.height,
            elements: svg.querySelectorAll("path, use, text, line, rect").length};
  });
  const titles = Array.from(document.querySelectorAll("svg title")).map(t => t.textContent);
  return JSON.stringify({text: document.body.innerText, figures: figures, titles: titles});
})()"""


class _Cdp:
    """One DevTools websocket: numbered calls, and every event kept."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self._next = 0
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            data = json.loads(message.data)
            if "id" in data and data["id"] in self._waiting:
                self._waiting.pop(data["id"]).set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[self._next] = future
        await self.ws.send_json({"id": self._next, "method": method, "params": params})
        reply = await asyncio.wait_for(future, 60)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    async def event(self, method: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(e["method"] == method for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {method} within {timeout} s")
            await asyncio.sleep(0.05)


def _devtools_port(user_dir: Path, proc: subprocess.Popen[bytes], timeout: float = 60) -> int:
    """The port Chromium wrote to ``DevToolsActivePort`` once it listens."""
    port_file = user_dir / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_file.exists() and port_file.read_text().strip():
            return int(port_file.read_text().split()[0])
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode} before listening")
        time.sleep(0.1)
    raise TimeoutError("chromium wrote no DevToolsActivePort")


def _errors(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for e in events:
        p = e.get("params", {})
        if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console: " + " ".join(str(a.get("value", a)) for a in p.get("args", [])))
        elif e["method"] == "Runtime.exceptionThrown":
            out.append(f"exception: {p.get('exceptionDetails', {}).get('text')}")
        elif e["method"] == "Log.entryAdded":
            entry = p.get("entry", {})
            if entry.get("level") == "error" and entry.get("source") not in _IGNORED_LOG_SOURCES:
                out.append(f"log ({entry.get('source')}): {entry.get('text')}")
    return out


async def _shoot(cdp: _Cdp, out: Path, full: bool) -> Path:
    clip = {"x": 0, "y": 0, "width": WIDTH, "height": HEIGHT, "scale": 1}
    if full:
        size = (await cdp.call("Page.getLayoutMetrics"))["cssContentSize"]
        clip |= {"width": size["width"], "height": min(size["height"], 30000)}
    shot = await cdp.call("Page.captureScreenshot", format="png", clip=clip,
                          captureBeyondViewport=full)  # fmt: skip
    out.write_bytes(base64.b64decode(shot["data"]))
    return out


async def _drive(port: int, page: Path, out_dir: Path, script: str | None) -> PageView:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/json/list") as reply:
            targets = await reply.json()
        target = next(t for t in targets if t["type"] == "page")
        async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            cdp = _Cdp(ws)
            for domain in ("Runtime", "Log", "Network", "Page"):
                await cdp.call(f"{domain}.enable")
            await cdp.call("Network.emulateNetworkConditions", offline=True, latency=0,
                           downloadThroughput=-1, uploadThroughput=-1)  # fmt: skip
            await cdp.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT,
                           deviceScaleFactor=1, mobile=False)  # fmt: skip
            await cdp.call("Page.navigate", url=page.resolve().as_uri())
            await cdp.event("Page.loadEventFired", 60)
            found = await cdp.call("Runtime.evaluate", expression=_INSPECT, returnByValue=True)
            seen = json.loads(found["result"]["value"])
            view = PageView(text=seen["text"], figures=seen["figures"], titles=seen["titles"])
            view.screenshots["top"] = await _shoot(cdp, out_dir / f"{page.stem}-top.png", False)
            view.screenshots["full"] = await _shoot(cdp, out_dir / f"{page.stem}-full.png", True)
            if script is not None:
                done = await cdp.call("Runtime.evaluate", expression=script, returnByValue=True)
                view.result = done["result"].get("value")
            await asyncio.sleep(0.2)  # late console lines
            view.errors = _errors(cdp.events)
            own = page.resolve().as_uri()
            view.requests = [
                url for e in cdp.events if e["method"] == "Network.requestWillBeSent"
                if (url := e["params"]["request"]["url"]) != own and not url.startswith("data:")
            ]  # fmt: skip
            return view


def open_page(
    page: Path, out_dir: Path, chromium: str | None = None, script: str | None = None
) -> PageView:
    """Open ``page`` in headless Chromium, network off; screenshots go to ``out_dir``;
    ``script`` (a JavaScript expression) runs after them, its value in ``PageView.result``.

    Raises:
        RuntimeError: Chromium is missing or exited before it listened.
        TimeoutError: it did not listen, or the page did not load, within 60 s.
    """
    binary = chromium or find_chromium()
    if binary is None:
        raise RuntimeError("chromium not found (apt-get install chromium, or set CHROMIUM)")
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="chromium-") as user_dir:
        proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={user_dir}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            port = _devtools_port(Path(user_dir), proc)
            return asyncio.run(_drive(port, page, out_dir, script))
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 15)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
