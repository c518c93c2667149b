"""Every option of every config group composes, and the pieces it names instantiate."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from isotune.norms import IsoBN, build_norm
from isotune.tasks import TaskSpec
from tests.conftest import CONF_DIR, compose_train_config


def options(group: str) -> list[str]:
    return sorted(path.stem for path in (CONF_DIR / group).glob("*.yaml"))


def test_defaults_compose_to_the_documented_run(tmp_path):
    cfg = compose_train_config([], tmp_path)
    assert cfg.task.name == "rte" and cfg.model.name == "minilm" and cfg.norm.name == "none"
    assert isinstance(cfg.seed, int)
    assert cfg.optim.lr == 5e-5 and cfg.optim.warmup_ratio == 0.06 and cfg.data.batch_size == 16
    assert cfg.callbacks.model_checkpoint.monitor == "val/accuracy"
    run_dir = OmegaConf.to_container(cfg.hydra.run)["dir"]  # unresolved
    assert run_dir.endswith("${now:%Y-%m-%d_%H-%M-%S-%f}")  # sub-second: folders never collide


@pytest.mark.parametrize("name", options("task"))
def test_every_task_composes_and_monitors_its_primary_metric(name, tmp_path):
    cfg = compose_train_config([f"task={name}"], tmp_path)
    task = TaskSpec.from_config(OmegaConf.to_container(cfg.task))
    assert task.name == name
    assert cfg.callbacks.model_checkpoint.monitor == f"val/{task.primary_metric}"
    assert cfg.callbacks.early_stopping.monitor == f"val/{task.primary_metric}"


def test_all_glue_tasks_are_present():
    assert options("task") == ["cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb", "wnli"]


@pytest.mark.parametrize("name", options("model"))
def test_every_model_composes(name, tmp_path):
    cfg = compose_train_config([f"model={name}", "model.name_or_path=/some/folder"], tmp_path)
    assert cfg.model.name == name and cfg.model.name_or_path == "/some/folder"
    assert cfg.model.pooling in ("pooler", "cls", "mean")


@pytest.mark.parametrize("name", options("norm"))
def test_every_norm_composes_and_builds(name, tmp_path):
    cfg = compose_train_config([f"norm={name}"], tmp_path)
    options_ = OmegaConf.to_container(cfg.norm)
    module = build_norm(options_.pop("name"), 8, **options_)
    assert module is not None
    if name == "isobn":
        assert isinstance(module, IsoBN)
        assert (module.momentum, module.eps, module.beta, module.bias_correction) == (
            0.05,
            1e-3,
            0.5,
            False,
        )


@pytest.mark.parametrize("name", options("trainer"))
def test_every_trainer_composes(name, tmp_path):
    cfg = compose_train_config([f"trainer={name}"], tmp_path)
    assert cfg.trainer._target_ == "lightning.pytorch.Trainer"
    if name in ("cpu", "default"):
        trainer = instantiate(cfg.trainer, logger=False, enable_progress_bar=False)
        assert trainer.max_epochs == 3
    if name == "gpu":
        assert cfg.trainer.precision == "bf16-mixed"
    if name == "ddp":
        assert cfg.trainer.strategy == "ddp"


@pytest.mark.parametrize("name", options("logger"))
def test_every_logger_composes_and_instantiates(name, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    cfg = compose_train_config([f"logger={name}"], tmp_path)
    loggers = [instantiate(entry) for entry in (cfg.logger or {}).values()]
    assert len(loggers) == (0 if name == "none" else 1)
    for logger in loggers:
        assert Path(logger.save_dir).resolve() == tmp_path.resolve()


@pytest.mark.parametrize("name", options("debug"))
def test_every_debug_preset_composes(name, tmp_path):
    cfg = compose_train_config([f"debug={name}"], tmp_path)
    assert (
        cfg.trainer.get("fast_dev_run")
        or cfg.trainer.get("overfit_batches")
        or cfg.trainer.get("limit_train_batches")
    )


@pytest.mark.parametrize("name", options("callbacks"))
def test_every_callback_set_instantiates(name, tmp_path):
    cfg = compose_train_config([f"callbacks={name}"], tmp_path)
    callbacks = [
        instantiate(entry) for entry in (cfg.callbacks or {}).values() if entry is not None
    ]
    assert len(callbacks) == len(cfg.callbacks or {})


def test_unknown_option_names_the_value_and_the_choices(tmp_path):
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException, match=r"task/qnl"):
        compose_train_config(["task=qnl"], tmp_path)


def test_wandb_job_type_is_train_or_analyze(tmp_path):
    from tests.conftest import compose_config

    assert compose_train_config(["logger=wandb"], tmp_path).logger.wandb.job_type == "train"
    analyze = compose_config("analyze", ["logger=wandb", "ckpt_path=x.ckpt"], tmp_path)
    assert analyze.logger.wandb.job_type == "analyze"
