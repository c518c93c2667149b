"""TensorBoard opens on the dashboard's layout: a small sweep with ``logger=tensorboard``, its
Custom Scalars page read through TensorBoard's API and looked at in headless Chromium."""

from __future__ import annotations

import os

import pytest

from isotune.dashboard.screenshot import capture, find_chromium
from tests.helpers.cli import run_script, tiny_cli_overrides

NO_CHROMIUM = "no Chromium on the PATH (Debian: apt-get install chromium)"


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
