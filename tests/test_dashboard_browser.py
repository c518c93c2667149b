"""TensorBoard opens on the dashboard's layout: a small sweep with ``logger=tensorboard``, its
Custom Scalars page read through TensorBoard's API and looked at in headless Chromium. Without a
browser: the screenshot tool keeps Chromium's sandbox unless it runs as root, and always stops
its TensorBoard."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from functools import partial

import pytest

from isotune.dashboard import screenshot as screenshot_tool
from isotune.dashboard.screenshot import capture, find_chromium, screenshot, stop
from tests.helpers.cli import run_script, tiny_cli_overrides

NO_CHROMIUM = "no Chromium on the PATH (Debian: apt-get install chromium)"
IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); "
    "time.sleep(300)"
)


@pytest.fixture
def chromium() -> str:
    """Chromium's path (skipped without it, but a failure under CI=true, where .ci/run installs
    it: a missing browser must not pass as a skip)."""
    path = find_chromium()
    if path is None:
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(NO_CHROMIUM)
    return path


@pytest.mark.slow
@pytest.mark.browser
def test_tensorboard_shows_isotropy_against_epochs_for_every_run(
    chromium, tmp_path, tiny_bert, glue_dir
):
    overrides = tiny_cli_overrides(tiny_bert, glue_dir, "logger=tensorboard")
    result = run_script(
        "train.py", "-m", "intervention=none,isobn", "seed=1,2", *overrides, cwd=tmp_path
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    (sweep,) = (tmp_path / "logs" / "multirun").iterdir()
    page = capture(sweep, tmp_path / "page.png", chromium)
    isotropy = page.points["Isotropy of the classifier input (post_norm) / log_iw"]
    assert sorted(isotropy.values()) == [3, 3, 3, 3]  # 4 runs, epochs 0 (pre-trained), 1, 2
    assert page.points["Scores / dev accuracy (rte)"]
    assert "Interventions / task loss" in page.collapsed
    assert (tmp_path / "page.png").stat().st_size > 10_000


def test_chromium_keeps_its_sandbox_unless_run_as_root(tmp_path, monkeypatch):
    commands = []
    monkeypatch.setattr(subprocess, "run", lambda command, **_: commands.append(command))
    for uid in (1000, 0):
        monkeypatch.setattr(os, "geteuid", lambda uid=uid: uid)
        screenshot("http://127.0.0.1:1", tmp_path / "page.png", "chromium")
    as_user, as_root = commands
    assert "--no-sandbox" not in as_user
    assert "--no-sandbox" in as_root


def test_a_tensorboard_that_ignores_sigterm_is_killed(tmp_path, monkeypatch):
    started, popen = [], subprocess.Popen

    def deaf_server(*_, **__) -> subprocess.Popen:
        server = popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE)
        server.stdout.readline()  # its SIGTERM handler is in place
        started.append(server)
        return server

    monkeypatch.setattr(subprocess, "Popen", deaf_server)
    monkeypatch.setattr(screenshot_tool, "_ready", lambda url: True)
    monkeypatch.setattr(screenshot_tool, "stop", partial(stop, grace_s=0.5))
    with pytest.raises(RuntimeError), screenshot_tool.tensorboard(tmp_path):
        raise RuntimeError("the page could not be read")
    (server,) = started
    server.stdout.close()
    assert server.returncode == -signal.SIGKILL
