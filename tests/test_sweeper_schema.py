"""The search's and the study's sweepers share one schema of search settings (issue 63 item 3):
a setting of every search is declared once, in
:class:`~hydra_plugins.isotune_launcher.search_schema.SearchSweeperConf`, and docs/search.md's
settings table names each one."""

import importlib.util
import re
from dataclasses import fields

import pytest

from hydra_plugins.isotune_launcher.optuna_sweeper import OptunaSweeperConf
from hydra_plugins.isotune_launcher.search_schema import SearchSweeperConf
from hydra_plugins.isotune_launcher.study_sweeper import StudySweeperConf
from tests.conftest import ROOT

SHARED = {f.name: f for f in fields(SearchSweeperConf)}


def test_both_sweepers_take_every_search_setting_from_the_one_schema_unchanged():
    for conf in (OptunaSweeperConf, StudySweeperConf):
        assert issubclass(conf, SearchSweeperConf)
        own = {f.name: f for f in fields(conf)}
        for name, shared in SHARED.items():
            # Redeclared in a sweeper, a setting would be two declarations to keep alike again.
            assert own[name].default == shared.default, (conf.__name__, name)
            assert own[name].default_factory == shared.default_factory, (conf.__name__, name)
            assert name not in vars(conf).get("__annotations__", {}), (conf.__name__, name)


def test_docs_settings_table_names_every_shared_search_setting():
    page = (ROOT / "docs" / "search.md").read_text()
    table = page.split("## Settings", 1)[1].split("\n\n", 2)[1]
    named = set(
        re.findall(r"`(\w+)`", "\n".join(line.split("|")[1] for line in table.splitlines()))
    )
    settings = {name for name in SHARED if not name.startswith("_") and name != "defaults"}
    assert settings <= named, sorted(settings - named)


@pytest.mark.parametrize(
    "module", sorted(p.name for p in (ROOT / "src/hydra_plugins/isotune_launcher").glob("*.py"))
)
def test_every_plugin_module_executes_as_hydras_plugin_scan_executes_it(module):
    """Hydra's scan executes each plugin module without entering it in ``sys.modules``: a
    dataclass there under ``from __future__ import annotations`` then fails as Python looks for
    its module (``SearchSweeperConf`` did, and every train.py with it)."""
    path = ROOT / "src/hydra_plugins/isotune_launcher" / module
    spec = importlib.util.spec_from_file_location(f"scanned_{path.stem}", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
