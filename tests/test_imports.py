"""The house's floors. Each wing of ``src/isotune/`` imports only the wings its ``__init__``
names (``May import: ...``), so no arrow runs up; the library wings (measures, norms, whitening,
penalties, enhancement) and the names of keys and runs and the statistics import in a fresh
interpreter without Lightning, Hydra or transformers; the offline sweep tools answer ``--help``
without torch."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import isotune

PACKAGE = Path(isotune.__file__).parent
# every wing may import them; they import no wing
GROUND = ("errors", "atomic_files", "file_digest")
# `python -m isotune.<name>`: above every wing
ENTRY_MODULES = ("aggregate", "rerun", "env", "submission")
WINGS = sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py"))
LIBRARY_WINGS = ("norms", "isotropy")
LIBRARY = (
    *(
        f"isotune.{wing}.{path.stem}".removesuffix(".__init__")
        for wing in LIBRARY_WINGS
        for path in sorted((PACKAGE / wing).glob("*.py"))
    ),
    "isotune.tracking.metric_keys",
    "isotune.tracking.run_names",
    "isotune.sweeps.statistics",
    "isotune.search.expected_best",
    "isotune.study.sequential",
)
TRAINING_STACK = {"lightning", "pytorch_lightning", "hydra", "omegaconf", "transformers", "peft"}
SEARCH_WINGS = ("isotune.search", "isotune.study")  # they import Optuna, SciPy
OFFLINE_TOOLS = ("isotune.aggregate", "isotune.rerun", "isotune.env", "isotune.sweeps.aggregate")


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
def test_the_search_core_imports_without_hydra():
    """The ask-launch-tell loop and the search it drives live beside the other cores; only the
    sweeper that adapts them to Hydra (hydra_plugins/isotune_launcher) imports Hydra."""
    imported = top_level_modules_after("import isotune.search.loop, isotune.search.search")
    assert "hydra" not in imported and "lightning" not in imported


@pytest.mark.slow
def test_hydras_plugin_scan_imports_neither_the_search_nor_optuna():
    """Hydra's plugin scan imports every plugin module on every run of train.py, a plain one
    included (issue 63 item 7): the sweepers hold their settings there, and import the search
    (:mod:`isotune.search`, :mod:`isotune.study`, Optuna with them) only when a search runs.
    SciPy is not asked after: Lightning, which the gpus launcher's run record imports, imports
    it anyway."""
    code = (
        "import json, sys\n"
        "from hydra.core.plugins import Plugins\n"
        "from hydra.plugins.sweeper import Sweeper\n"
        "found = sorted(p.__name__ for p in Plugins.instance().discover(Sweeper))\n"
        "print(json.dumps([found, sorted(sys.modules)]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    found, imported = json.loads(result.stdout.splitlines()[-1])
    assert {"OptunaSweeper", "StudySweeper"} <= set(found)  # the scan did find them
    search = [m for m in imported if m.split(".")[0] == "optuna" or m.startswith(SEARCH_WINGS)]
    assert search == []


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


def may_import(wing: str) -> set[str]:
    """The wings a wing's ``__init__`` docstring names after ``May import:``, up to the full stop
    (``no wing``: none)."""
    docstring = ast.get_docstring(ast.parse((PACKAGE / wing / "__init__.py").read_text())) or ""
    found = re.search(r"^May import: ([^.]+)\.$", docstring, re.MULTILINE)  # over lines
    assert found, f"isotune/{wing}/__init__.py names no 'May import: <wings>.' line"
    return set() if found[1] == "no wing" else set(re.split(r",\s+", found[1]))


def imported_wings(path: Path) -> set[str]:
    """The first names under ``isotune.`` that a module imports (at the top or in a function)."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:  # relative: from the module's own package, or one above it
                source = ".".join([package.rsplit(".", node.level - 1)[0], source]).rstrip(".")
            names.update(f"{source}.{alias.name}" for alias in node.names)
    return {name.split(".")[1] for name in names if name.startswith("isotune.")}


def test_the_package_holds_wings_the_ground_and_the_entry_modules_only():
    modules = {path.stem for path in PACKAGE.glob("*.py")} - {"__init__"}
    assert modules == {*GROUND, *ENTRY_MODULES}, "a new top-level module belongs in a wing"


def test_each_wing_imports_only_the_wings_its_init_names_and_none_runs_up():
    declared = {wing: may_import(wing) for wing in WINGS}
    assert set().union(*declared.values()) <= set(WINGS), declared
    try:
        tuple(TopologicalSorter(declared).static_order())
    except CycleError as cycle:
        pytest.fail(f"the wings' May import lines form a cycle: {cycle.args[1]}")
    for wing in WINGS:
        for path in sorted((PACKAGE / wing).rglob("*.py")):
            beyond = imported_wings(path) - {wing, *GROUND, *declared[wing]}
            assert not beyond, f"{path.relative_to(PACKAGE)} imports the wings {sorted(beyond)}"
    for name in GROUND:
        assert imported_wings(PACKAGE / f"{name}.py") <= set(GROUND), name
