"""Every option of every config group composes, and the pieces it names instantiate."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.utils import instantiate
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.loggers import WandbLogger
from omegaconf import OmegaConf

from isotune.callbacks.isotropy import IsotropyMonitor
from isotune.dashboard.tensorboard import EpochAxesTensorBoardLogger
from isotune.data.own_data import complete_own_task
from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError
from isotune.model.classifier import POOLINGS
from isotune.norms.registry import NORMS, build_norm
from isotune.record.checkpoints import RunCheckpoint
from isotune.record.csv_logging import RunCSVLogger
from isotune.record.rng_state import BatchRngState
from isotune.sweeps import gpu_slots
from tests.conftest import CONF_DIR, compose_train_config


def options(group: str) -> list[str]:
    return sorted(path.stem for path in (CONF_DIR / group).glob("*.yaml"))


def test_defaults_compose_to_the_documented_run(tmp_path):
    cfg = compose_train_config([], tmp_path)
    assert cfg.task.name == "rte" and cfg.model.name == "minilm" and cfg.norm.name == "none"
    assert cfg.seed == 42
    assert cfg.optim.lr == 5e-5 and cfg.optim.warmup_ratio == 0.06 and cfg.data.batch_size == 16
    assert cfg.callbacks.model_checkpoint.monitor == "val/accuracy"
    run_dir = OmegaConf.to_container(cfg.hydra.run)["dir"]  # unresolved
    assert run_dir.endswith("${now:%Y-%m-%d_%H-%M-%S-%f}")  # sub-second: folders never collide


@pytest.mark.parametrize("name", options("task"))
def test_every_task_composes_and_monitors_its_primary_metric(name, tmp_path):
    data = tmp_path / "data.tsv"  # task=files reads its labels and metrics from its files
    data.write_text("sentence\tlabel\na fine film\t1\na dull film\t0\n")
    files = [f"data.train_file={data}", f"data.validation_file={data}"] if name == "files" else []
    cfg = compose_train_config([f"task={name}", *files], tmp_path)
    complete_own_task(cfg)
    task = TaskSpec.from_config(OmegaConf.to_container(cfg.task))
    assert task.name == name
    assert cfg.callbacks.model_checkpoint.monitor == f"val/{task.primary_metric}"
    assert cfg.callbacks.early_stopping.monitor == f"val/{task.primary_metric}"


def task_config(name: str, **changes) -> dict:
    return {**OmegaConf.to_container(OmegaConf.load(CONF_DIR / "task" / f"{name}.yaml")), **changes}


def test_only_regression_tasks_bound_their_labels(tmp_path):
    for name in set(options("task")) - {"files"}:  # files: its files decide (docs/data.md)
        task = TaskSpec.from_config(task_config(name))
        assert (task.label_range is not None) == task.is_regression, name
    stsb = compose_train_config(["task=stsb", "task.label_range=[1,10]"], tmp_path).task
    assert TaskSpec.from_config(stsb).label_range == (1, 10)  # a list on the command line


@pytest.mark.parametrize(
    ("name", "label_range", "problem"),
    [
        ("stsb", [5, 0], "Task stsb: label_range=[5, 0] must be two finite numbers, low < high"),
        ("stsb", [0, 0], "Task stsb: label_range=[0, 0] must be two finite numbers, low < high"),
        ("stsb", [0], "Task stsb: label_range=[0] must be two finite numbers, low < high"),
        ("stsb", [0, float("inf")], "Task stsb: label_range=[0, inf] must be two finite numbers"),
        ("stsb", "0-5", "Task stsb: label_range='0-5' must be two finite numbers, low < high"),
        ("rte", [0, 1], "Task rte: label_range=[0, 1] bounds regression scores, but rte has class"),
    ],
)
def test_a_bad_label_range_names_the_task_the_value_and_the_fix(name, label_range, problem):
    with pytest.raises(IsotuneError) as raised:
        TaskSpec.from_config(task_config(name, label_range=label_range))
    message = str(raised.value)
    assert message.startswith(problem)
    if name == "rte":
        assert message.endswith("Fix: remove label_range from conf/task/rte.yaml.")
    else:
        assert "Fix: set it in conf/task/stsb.yaml or with 'task.label_range=[low,high]'" in message


def test_all_glue_tasks_are_present():
    glue = ["cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb", "wnli"]
    assert options("task") == sorted([*glue, "files"])  # files: your own data (docs/data.md)


@pytest.mark.parametrize("name", options("model"))
def test_every_model_composes(name, tmp_path):
    cfg = compose_train_config([f"model={name}", "model.name_or_path=/some/folder"], tmp_path)
    assert cfg.model.name == name and cfg.model.name_or_path == "/some/folder"
    assert cfg.model.pooling in POOLINGS


@pytest.mark.parametrize("name", options("norm"))
def test_every_norm_composes_and_builds(name, tmp_path):
    cfg = compose_train_config([f"norm={name}"], tmp_path)
    options_ = OmegaConf.to_container(cfg.norm)
    module = build_norm(options_.pop("name"), 8, **options_)
    assert type(module) is NORMS[name].module
    assert {option: getattr(module, option) for option in options_} == options_
    if name == "isobn":  # the released code's defaults
        assert (module.momentum, module.eps, module.beta, module.bias_correction) == (
            0.05,
            1e-3,
            0.5,
            False,
        )


TRAINERS = {  # what each trainer option sets, on top of default.yaml
    "default": {"accelerator": "auto", "devices": 1, "precision": "32-true", "strategy": None},
    "cpu": {"accelerator": "cpu", "devices": 1, "precision": "32-true", "strategy": None},
    "cpu_bf16": {"accelerator": "cpu", "devices": 1, "precision": "bf16-mixed", "strategy": None},
    "gpu": {"accelerator": "gpu", "devices": 1, "precision": "bf16-mixed", "strategy": None},
    "ddp": {"accelerator": "gpu", "devices": -1, "precision": "bf16-mixed", "strategy": "ddp"},
}
KNOB_DEFAULTS = {"limit_train_batches": 1.0, "limit_val_batches": 1.0, "accumulate_grad_batches": 1}
KNOBS = {"limit_train_batches": 4, "limit_val_batches": 0.5, "accumulate_grad_batches": 2}
KNOB_OVERRIDES = [f"trainer.{key}={value}" for key, value in KNOBS.items()]  # no `+` needed


def test_every_trainer_option_is_described():
    assert sorted(TRAINERS) == options("trainer")


@pytest.mark.parametrize("name", options("trainer"))
def test_every_trainer_composes_with_the_lightning_knobs(name, tmp_path):
    cfg = compose_train_config([f"trainer={name}"], tmp_path)
    assert cfg.trainer._target_ == "lightning.pytorch.Trainer"
    assert {key: cfg.trainer.get(key) for key in TRAINERS[name]} == TRAINERS[name]
    assert {key: cfg.trainer[key] for key in KNOBS} == KNOB_DEFAULTS
    cfg = compose_train_config([f"trainer={name}", *KNOB_OVERRIDES], tmp_path)
    assert {key: cfg.trainer[key] for key in KNOBS} == KNOBS


@pytest.mark.parametrize("name", ["cpu", "default"])
def test_trainer_takes_the_lightning_knobs(name, tmp_path):
    cfg = compose_train_config([f"trainer={name}", *KNOB_OVERRIDES], tmp_path)
    trainer = instantiate(cfg.trainer, logger=False, enable_progress_bar=False)
    assert trainer.max_epochs == 3
    assert {key: getattr(trainer, key) for key in KNOBS} == KNOBS


LOGGERS = {
    "csv": [RunCSVLogger],
    "tensorboard": [EpochAxesTensorBoardLogger],
    "wandb": [WandbLogger],
    "none": [],
}


def test_every_logger_option_is_described():
    assert sorted(LOGGERS) == options("logger")


@pytest.mark.parametrize("name", options("logger"))
def test_every_logger_composes_and_instantiates(name, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    cfg = compose_train_config([f"logger={name}"], tmp_path)
    loggers = [instantiate(entry) for entry in (cfg.logger or {}).values()]
    assert [type(logger) for logger in loggers] == LOGGERS[name]
    for logger in loggers:
        assert Path(logger.save_dir).resolve() == tmp_path.resolve()


DEBUG_PRESETS = {  # what Lightning runs under each preset: epochs, train and val batches per epoch
    "fdr": (1, 1, 1),
    "limit": (2, 4, 2),
    "overfit": (20, 4, 4),
}


def test_every_debug_preset_is_described():
    assert sorted(DEBUG_PRESETS) == options("debug")


@pytest.mark.parametrize("name", options("debug"))
def test_every_debug_preset_limits_the_run(name, tmp_path):
    cfg = compose_train_config(["trainer=cpu", f"debug={name}"], tmp_path)
    trainer = instantiate(cfg.trainer, logger=False, enable_progress_bar=False)
    limits = (trainer.max_epochs, trainer.limit_train_batches, trainer.limit_val_batches)
    assert limits == DEBUG_PRESETS[name]


CALLBACK_SETS = {
    "default": {
        "model_checkpoint": RunCheckpoint,
        "last_checkpoint": RunCheckpoint,
        "rng_state": BatchRngState,
        "early_stopping": EarlyStopping,
        "isotropy": IsotropyMonitor,
    },
    "isotropy": {"isotropy": IsotropyMonitor},
    "none": {},
}


def test_every_callback_set_is_described():
    assert sorted(CALLBACK_SETS) == options("callbacks")


@pytest.mark.parametrize("name", options("callbacks"))
def test_every_callback_set_instantiates(name, tmp_path):
    cfg = compose_train_config([f"callbacks={name}"], tmp_path)
    callbacks = {key: type(instantiate(entry)) for key, entry in (cfg.callbacks or {}).items()}
    assert callbacks == CALLBACK_SETS[name]


def test_gpus_launcher_composes_from_its_yaml(tmp_path):
    cfg = compose_train_config(["hydra/launcher=gpus", "hydra.launcher.jobs_per_gpu=2"], tmp_path)
    assert OmegaConf.to_container(cfg.hydra.launcher) == {  # unresolved
        "_target_": "hydra_plugins.isotune_launcher.gpus_launcher.GpusLauncher",
        "gpus": None,
        "jobs_per_gpu": 2,
        "n_jobs": None,
        "threads_per_job": None,
        "slot_dir": f"${{hydra.sweep.dir}}/{gpu_slots.SWEEP_SLOT_DIR}",  # where rerun looks
    }
    assert compose_train_config(["hydra/launcher=gpus"], tmp_path).hydra.launcher.jobs_per_gpu == 1


def test_unknown_option_names_the_value_and_the_choices(tmp_path):
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException, match=r"task/qnl"):
        compose_train_config(["task=qnl"], tmp_path)


def test_wandb_job_type_is_train_or_analyze(tmp_path):
    from tests.conftest import compose_config

    assert compose_train_config(["logger=wandb"], tmp_path).logger.wandb.job_type == "train"
    analyze = compose_config("analyze", ["logger=wandb", "ckpt_path=x.ckpt"], tmp_path)
    assert analyze.logger.wandb.job_type == "analyze"
