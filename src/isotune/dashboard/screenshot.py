"""Look at the TensorBoard twin in a real browser.

``python -m isotune.dashboard.screenshot LOGDIR OUT.png`` starts TensorBoard on 127.0.0.1 (a free
port) over ``LOGDIR``, asks its HTTP API for the custom-scalars layout and the points of every
chart of every run, saves headless Chromium's screenshot of the Custom Scalars page, counts the
picture's coloured pixels (the runs' lines: the page itself is grey and white) and stops
TensorBoard, whatever happened. It fails, naming what is missing, when a chart has no points or
nothing is drawn. Chromium keeps its sandbox unless the tool runs as root.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

from isotune.errors import IsotuneError
from isotune.tracking.reporting import counted

BROWSERS = ("chromium", "chromium-browser")  # Debian's package, and Ubuntu's name for it
PLUGIN = "/data/plugin/custom_scalars"
MIN_COLOURED = 0.001  # share of the picture's pixels the lines cover at the least


def find_chromium() -> str | None:
    """The headless-capable Chromium on the PATH, or None."""
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def _get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


@contextmanager
def tensorboard(logdir: Path, timeout: float = 120) -> Iterator[str]:
    """TensorBoard over ``logdir`` on 127.0.0.1, once it lists runs; yields its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir)),
            *("--host", "127.0.0.1", "--port", str(port), "--load_fast", "false"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while not _ready(url):
            if server.poll() is not None or time.monotonic() > deadline:
                raise IsotuneError(
                    f"TensorBoard over {logdir} did not list its runs within {timeout:.0f} s: "
                    f"{server.stderr.read()[-500:] if server.poll() is not None else 'still up'}"
                )
            time.sleep(1)
        yield url
    finally:
        stop(server)


def stop(process: subprocess.Popen, grace_s: float = 30) -> None:
    """End ``process``: SIGTERM, and SIGKILL if it is still alive ``grace_s`` seconds later, so
    that a TensorBoard that hangs in its shutdown (or ignores SIGTERM) never outlives the tool."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _ready(url: str) -> bool:
    try:
        return bool(_get(f"{url}/data/runs")) and bool(_get(f"{url}{PLUGIN}/layout"))
    except OSError:
        return False


@dataclass(frozen=True)
class Page:
    """What the Custom Scalars page shows: per open chart (``category / title``), the number of
    points of each run; and the charts of collapsed categories."""

    points: dict[str, dict[str, int]]
    collapsed: list[str]

    def empty(self) -> list[str]:
        """The open charts that some run draws nothing in."""
        return [chart for chart, runs in self.points.items() if not all(runs.values())]


def page_data(url: str, runs: Sequence[str] | None = None) -> Page:
    """The layout and the points each run has in each chart, from TensorBoard's HTTP API."""
    runs = list(runs or _get(f"{url}/data/runs"))
    points, collapsed = {}, []
    for category in _get(f"{url}{PLUGIN}/layout")["category"]:
        for chart in category["chart"]:
            name = f"{category['title']} / {chart['title']}"
            if category.get("closed"):
                collapsed.append(name)
                continue
            (regex,) = chart["multiline"]["tag"]
            points[name] = {
                run: sum(
                    map(
                        len,
                        _get(f"{url}{PLUGIN}/scalars?{urlencode({'run': run, 'tag': regex})}")[
                            "tag_to_events"
                        ].values(),
                    )
                )
                for run in runs
            }
    return Page(points, collapsed)


def screenshot(url: str, out: Path, chromium: str, size: tuple[int, int] = (1600, 2400)) -> Path:
    """Headless Chromium's picture of the Custom Scalars page, in Chromium's sandbox unless this
    process runs as root (where Chromium refuses to start with it)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    no_sandbox = ["--no-sandbox"] if os.geteuid() == 0 else []
    subprocess.run(
        [
            *(chromium, "--headless", *no_sandbox, "--disable-gpu", "--hide-scrollbars"),
            *(f"--window-size={size[0]},{size[1]}", "--virtual-time-budget=30000"),
            *(f"--screenshot={out.resolve()}", f"{url}/#custom_scalars"),
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    return out


def coloured_share(png: Path) -> float:
    """The share of the picture's pixels that are coloured (saturation above 0.5)."""
    import matplotlib.image

    pixels = matplotlib.image.imread(png)[..., :3]
    high, low = pixels.max(axis=-1), pixels.min(axis=-1)
    return float(((high - low) > 0.5 * high.clip(min=1e-6)).mean())


def capture(logdir: Path, out: Path, chromium: str) -> Page:
    """Screenshot of ``logdir``'s Custom Scalars page into ``out``, checked: every open chart has
    points of every run and the picture shows lines."""
    with tensorboard(logdir) as url:
        page = page_data(url)
        if not page.points or page.empty():
            raise IsotuneError(
                f"TensorBoard over {logdir}: charts without points {page.empty() or 'all'}; "
                "were the runs trained with logger=tensorboard?"
            )
        screenshot(url, out, chromium)
    share = coloured_share(out)
    if share < MIN_COLOURED:
        raise IsotuneError(
            f"{out}: {share:.2%} of the pixels are coloured, so no line was drawn; open "
            f"tensorboard --logdir {logdir} to see why."
        )
    return page


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m isotune.dashboard.screenshot", description=__doc__.splitlines()[0]
    )
    parser.add_argument("logdir", type=Path, help="e.g. logs/multirun/<sweep> (logger=tensorboard)")
    parser.add_argument("out", type=Path, help="the PNG to write")
    args = parser.parse_args(argv)
    chromium = find_chromium()
    if chromium is None:
        print("error: no Chromium on the PATH; install it (Debian: apt-get install chromium).")
        return 2
    try:
        page = capture(args.logdir, args.out, chromium)
    except IsotuneError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    runs = len(next(iter(page.points.values())))
    charts = counted(len(page.points), "chart")
    print(f"Wrote {args.out}: {charts}, {counted(runs, 'run')}, all with points.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
