"""The norm registry is the one list of norms: configs and benchmarks follow it; the aggregate's
tables need no registry (reading a sweep imports no torch) and list the baseline first."""

from __future__ import annotations

import json

from isotune.norms.registry import NORMS
from isotune.sweeps import aggregate, comparisons
from tests.helpers.norms import check_norm_configs


def test_every_norm_config_names_its_registry_key_and_builds_its_registered_module():
    check_norm_configs()  # norm=<key> selects conf/norm/<key>.yaml


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
