"""The norm registry is the one list of norms: configs and benchmarks follow it; the aggregate's
tables need no registry (reading a sweep imports no torch) and list the baseline first."""

from __future__ import annotations

import json

import yaml

from isotune.norms.registry import NORMS, build_norm
from isotune.sweeps import aggregate, comparisons
from tests.conftest import CONF_DIR


def norm_configs() -> dict[str, dict]:
    return {
        path.stem: yaml.safe_load(path.read_text())
        for path in sorted((CONF_DIR / "norm").glob("*.yaml"))
    }


def test_every_norm_config_names_its_registry_key_and_every_key_has_a_config():
    names = {stem: config["name"] for stem, config in norm_configs().items()}
    assert names == {key: key for key in NORMS}  # norm=<key> selects conf/norm/<key>.yaml


def test_every_norm_config_builds_its_registered_module():
    for options in norm_configs().values():
        name = options.pop("name")
        module = build_norm(name, 8, **options)
        assert type(module) is NORMS[name].module
        for option, value in options.items():
            assert getattr(module, option) == value


def test_the_baseline_norm_is_registered_first():
    assert next(iter(NORMS)) == comparisons.AXES["norm"].baseline == "none"


def test_aggregate_lists_the_baseline_norm_first_then_the_rest_alphabetically(tmp_path):
    # Registered norms and one an older version had ("layernorm", not registered) alike.
    expected = ["none", "alpha", "batchnorm", "isobn", "layernorm", "zeta"]
    for norm in reversed(expected):
        run_dir = tmp_path / norm
        run_dir.mkdir()
        result = dict(status="completed", model="minilm", norm=norm, task="rte", seed=1)
        result.update(primary_metric="accuracy", best={"accuracy": 0.5})
        (run_dir / "results.json").write_text(json.dumps(result))
    result = aggregate.aggregate([tmp_path])
    assert result.summary["norm"].tolist() == expected
    results_table = result.report().split("\n\n")[1]  # after "## Results"
    rows = [row.split(" | ")[0] for row in results_table.splitlines()[2:]]
    assert rows == [f"| norm={norm}" for norm in expected]
