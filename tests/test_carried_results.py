"""The project's carried results stay current: every folder under docs/results that holds runs
is made again from its records, as docs/results.md tells a reader to, and its text files (tables,
reports, the study's numbers, the W&B report) must come out as committed. A change to what a
report says cannot land beside stale copies (issue 63 item 5: a carried wandb_report.json still
showed a test its study report had dropped). The figures are not compared: their bytes move with
matplotlib's version."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

RESULTS = ROOT / "docs" / "results"
CARRIED = sorted(path.parent.name for path in RESULTS.glob("*/multirun.yaml"))
TEXT = {".md", ".csv", ".yaml", ".json", ".txt"}


def _text_files(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): path.read_text()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.suffix in TEXT
    }


@pytest.mark.parametrize("name", CARRIED)
def test_a_carried_folder_made_again_from_its_records_is_the_committed_one(name, tmp_path):
    folder = Path("docs") / "results" / name  # as typed at the repository's root
    shutil.copytree(RESULTS / name, tmp_path / folder)
    committed = _text_files(tmp_path / folder)
    commands = [[sys.executable, "-m", "isotune.aggregate", str(folder)]]
    if (RESULTS / name / "wandb_report.json").is_file():
        commands.append(
            [sys.executable, "-m", "isotune.dashboard", "report", str(folder), "--dry-run"]
        )
    for command in commands:
        done = subprocess.run(
            command, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=os.environ
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    again = _text_files(tmp_path / folder)
    stale = sorted(f for f in again if committed.get(f) != again[f])
    assert not stale, (
        f"docs/results/{name}: {stale} differ when made again from the records. Fix: from the "
        f"repository's root, {' && '.join('python ' + ' '.join(c[1:]) for c in commands)}, "
        "and commit what it writes."
    )
