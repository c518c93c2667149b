"""The house's floors: the library (measures, norms, whitening, penalties, enhancement, the names
of keys and runs, the statistics) imports in a fresh interpreter without Lightning, Hydra or
transformers; the offline sweep tools answer ``--help`` without torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

LIBRARY = (
    "isotune.isotropy",
    "isotune.isotropy.measures",
    "isotune.isotropy.outliers",
    "isotune.isotropy.figures",
    "isotune.norms.registry",
    "isotune.norms.whitening",
    "isotune.isotropy.penalties",
    "isotune.isotropy.enhance",
    "isotune.norms.ranges",
    "isotune.tracking.metric_keys",
    "isotune.tracking.run_names",
    "isotune.sweeps.statistics",
)
TRAINING_STACK = {"lightning", "pytorch_lightning", "hydra", "omegaconf", "transformers", "peft"}
OFFLINE_TOOLS = ("isotune.aggregate", "isotune.rerun", "isotune.sweeps.aggregate")


def top_level_modules_after(code: str) -> set[str]:
    """The top-level packages a fresh interpreter has imported after running ``code``."""
    report = "import json, sys; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    result = subprocess.run(
        [sys.executable, "-c", f"{code}\n{report}"], capture_output=True, text=True, check=True
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


@pytest.mark.slow
@pytest.mark.parametrize("module", LIBRARY)
def test_a_library_module_imports_without_the_training_stack(module):
    imported = top_level_modules_after(f"import {module}")
    assert imported.isdisjoint(TRAINING_STACK), sorted(imported & TRAINING_STACK)


@pytest.mark.slow
@pytest.mark.parametrize("module", OFFLINE_TOOLS)
def test_an_offline_tool_answers_help_without_torch(module):
    code = (
        "import runpy, sys\n"
        f"sys.argv = [{module!r}, '--help']\n"
        "try:\n"
        f"    runpy.run_module({module!r}, run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code"
    )
    imported = top_level_modules_after(code)
    heavy = {"torch", "lightning", "pytorch_lightning", "transformers", "peft"}  # omegaconf is fine
    assert imported.isdisjoint(heavy), sorted(imported & heavy)
