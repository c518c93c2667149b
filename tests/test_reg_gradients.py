"""benchmarks/reg_gradients.py as typed: its whole help, and one message for each bad option,
before the data or a model loads."""

from __future__ import annotations

import sys

import pytest
import reg_gradients
from omegaconf import DictConfig

from tests.helpers.presets import options, preset


@pytest.fixture(scope="module")
def composed() -> dict[str, DictConfig]:
    return reg_gradients.intervention_configs()


@pytest.fixture
def typed(monkeypatch, capsys, composed):
    """``python benchmarks/reg_gradients.py <args>`` without GLUE_DIR, in this process: its exit
    status (a message where it exits with one), stdout and stderr. Without GLUE_DIR the script
    stops, with its own message, just after the options and presets are read. The presets are
    composed once for the module (Hydra takes seconds), each call gets copies."""
    monkeypatch.setattr(
        reg_gradients,
        "intervention_configs",
        lambda: {name: cfg.copy() for name, cfg in composed.items()},
    )
    monkeypatch.delenv("GLUE_DIR", raising=False)

    def run(*args: str) -> tuple[int | str | None, str, str]:
        monkeypatch.setattr(sys, "argv", ["reg_gradients.py", *args])
        with pytest.raises(SystemExit) as exited:
            reg_gradients.main()
        out, err = capsys.readouterr()
        return exited.value.code, out, err

    return run


def test_the_help_is_the_whole_description_and_every_option_has_its_own(typed):
    status, out, _ = typed("--help")
    assert status == 0
    assert "MiniLM on RTE at batch 16, at the pre-trained model." in out  # the sentence whole
    assert "trains mostly on the penalty, whatever the scales of the two losses." in out
    options = " ".join(out[out.index("options:") :].split())
    for option, help_text in [
        ("--batches BATCHES", "training batches measured"),
        ("--batch-size BATCH_SIZE", "examples per training batch"),
        ("--max-length MAX_LENGTH", "tokens per example"),
        ("--override [OVERRIDE ...]", "reg.<key>=<value> settings"),
    ]:
        assert f"{option} {help_text}" in options


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batches", "0"], "argument --batches: must be an integer >= 1, got '0'"),
        (["--batch-size", "-4"], "argument --batch-size: must be an integer >= 1, got '-4'"),
        (["--max-length", "x"], "argument --max-length: must be an integer >= 1, got 'x'"),
        (
            ["--override", "reg.zetta=0.3"],
            "--override reg.zetta=0.3: no preset's penalty has reg.zetta. Fix: one of "
            "reg.include_padding, reg.layers,",
        ),
        (
            ["--override", "model.pooling=mean"],
            "--override model.pooling=mean: give key=value settings of the penalty, "
            "reg.<key>=<value>",
        ),
        (["--override", "reg.zeta"], "--override reg.zeta: give key=value settings"),
        (["--override", "reg.zeta=3"], "reg.zeta=3: must be a number in [0, 1]"),
        (["--override", "reg.layers=[1,2"], "--override reg.layers=[1,2: the value is not YAML"),
        (["--override", "reg.weight=0"], "--override reg.weight=0 leaves correg no penalty"),
    ],
)
def test_a_bad_option_is_one_message(typed, args, message):
    status, _, err = typed(*args)
    assert status == 2 and err.count("error:") == 1 and message in err, err
    assert "Traceback" not in err


def test_an_override_goes_to_the_presets_whose_penalty_has_its_key(typed):
    status, _, _ = typed("--override", "reg.zeta=0.3", "reg.layers=last")
    assert status.startswith("Set GLUE_DIR")  # options and presets read: on to the data
    rows = reg_gradients.measured_presets(["reg.zeta=0.3", "reg.layers=last"])
    configs = {name: cfg for presets in rows.values() for name, cfg in presets}
    penalised = [name for name in options("intervention") if preset(name)[1] != "none"]
    assert sorted(configs) == penalised  # every preset with a penalty, from conf/intervention
    for name, cfg in configs.items():
        assert cfg.reg.layers == "last"
        assert cfg.reg.get("zeta") == (0.3 if cfg.reg.name == "istar" else None), name
    assert ["istar_less", "istar_more"] in [[name for name, _ in row] for row in rows.values()]
