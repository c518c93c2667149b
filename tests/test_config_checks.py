"""Bad config values stop a run with one message naming each key, value and valid range."""

from __future__ import annotations

import json

import pytest
import torch

from isotune.errors import IsotuneError
from isotune.training.config_checks import SEED_RANGE, check_train_config
from isotune.training.run import train
from tests.conftest import CONF_DIR, compose_train_config
from tests.helpers.cli import run_cli
from tests.helpers.config_checks import problems

NOT_A_MODEL = "/no/such/model-folder"  # loading it would fail: a failure must come before that


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["norm=isobn"],
        ["norm=batchnorm"],
        ["experiment=isobn_glue"],
        *([f"debug={path.stem}"] for path in sorted((CONF_DIR / "debug").glob("*.yaml"))),
        # the edges of each range are valid
        ["seed=0", "data.num_workers=0", "optim.weight_decay=0", "optim.warmup_ratio=1"],
        ["seed=4294967295", "seed_init=0", "seed_data=4294967295", "failure.margin=0.99"],
        ["optim.betas=[0,0.5]", "trainer.max_epochs=-1"],
        ["norm=isobn", "norm.momentum=1", "norm.beta=0", "trainer.max_epochs=null"],
        ["callbacks.isotropy.probe_size=1", "callbacks.isotropy.token_layers=[0,-1]"],
        ["callbacks.isotropy.local_k=1", "callbacks.isotropy.outlier_factor=0.5"],
    ],
)
def test_shipped_configs_and_range_edges_pass(overrides, gpu_visible):
    check_train_config(compose_train_config(overrides))


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("seed=abc", "seed='abc': must be an integer"),
        # The isotropy callback's settings fail here, not after the model loads (probe_size=0
        # used to end in a bare ValueError from max(), and a negative one sliced the probe).
        ("callbacks.isotropy.probe_size=0", "callbacks.isotropy.probe_size=0: must be an integer"),
        (
            "callbacks.isotropy.probe_size=-5",
            "callbacks.isotropy.probe_size=-5: must be an integer >= 1",
        ),
        (
            "callbacks.isotropy.max_tokens=0",
            "callbacks.isotropy.max_tokens=0: must be an integer >= 1",
        ),
        (
            "callbacks.isotropy.token_layers=last",
            "callbacks.isotropy.token_layers='last': must be a list of",
        ),
        (
            "callbacks.isotropy.local_k=0",
            "callbacks.isotropy.local_k=0: must be null or an integer >= 1",
        ),
        (
            "callbacks.isotropy.dominant_factor=0",
            "callbacks.isotropy.dominant_factor=0: must be a finite number > 0",
        ),
        (
            "callbacks.isotropy.figures=maybe",
            "callbacks.isotropy.figures='maybe': must be true or false",
        ),
        (
            "callbacks.isotropy.outlier_factor=-1",
            "callbacks.isotropy.outlier_factor=-1: must be a finite number > 0",
        ),
        ("callbacks.isotropy.rogue_k=0", "callbacks.isotropy.rogue_k=0: must be an integer >= 1"),
        ("seed=1.5", "seed=1.5: must be an integer"),
        ("seed=true", "seed=True: must be an integer"),
        # Each seed is numpy's (Lightning's seed_everything): a traceback after the data loaded.
        ("seed=-1", f"seed=-1: must be {SEED_RANGE}"),
        ("seed_init=-1", f"seed_init=-1: must be {SEED_RANGE} (default: seed)"),
        ("seed_init=4294967296", f"seed_init=4294967296: must be {SEED_RANGE} (default: seed)"),
        (
            "seed_data=18446744073709551616",  # overflowed torch's generator
            f"seed_data=18446744073709551616: must be {SEED_RANGE} (default: seed)",
        ),
        ("seed_data=-3", f"seed_data=-3: must be {SEED_RANGE} (default: seed)"),  # was accepted
        ("resume=always", "resume='always': must be one of ['auto', 'never']"),
        ("data.batch_size=abc", "data.batch_size='abc': must be an integer >= 1"),
        ("data.batch_size=0", "data.batch_size=0: must be an integer >= 1"),
        ("data.eval_batch_size=-8", "data.eval_batch_size=-8: must be an integer >= 1"),
        ("data.max_length=0", "data.max_length=0: must be an integer >= 1"),
        ("data.num_workers=-1", "data.num_workers=-1: must be an integer >= 0"),
        ("data.drop_last=yes_please", "data.drop_last='yes_please': must be true or false"),
        ("optim.lr=-1", "optim.lr=-1: must be a finite number > 0"),
        ("optim.lr=inf", "optim.lr=inf: must be a finite number > 0"),
        ("optim.weight_decay=-0.01", "optim.weight_decay=-0.01: must be a finite number >= 0"),
        ("optim.adam_eps=0", "optim.adam_eps=0: must be a finite number > 0"),
        ("optim.betas=[0.9,1.0]", "optim.betas=[0.9, 1.0]: must be two numbers in [0, 1)"),
        ("optim.betas=[0.9]", "optim.betas=[0.9]: must be two numbers in [0, 1)"),
        ("optim.warmup_ratio=1.5", "optim.warmup_ratio=1.5: must be a number in [0, 1]"),
        ("trainer.max_epochs=0", "trainer.max_epochs=0: must be an integer >= 1, or -1 or null"),
    ],
)
def test_each_bad_value_is_named_with_its_valid_range(override, line):
    (reported,) = problems(override)
    assert reported.strip().startswith(line)


@pytest.mark.parametrize(
    ("norm", "override", "line"),
    [
        ("isobn", "norm.momentum=0", "norm.momentum=0: must be a number in (0, 1]"),
        ("batchnorm", "norm.momentum=1.5", "norm.momentum=1.5: must be a number in (0, 1]"),
        ("isobn", "norm.eps=-1e-3", "norm.eps=-0.001: must be a finite number > 0"),
        ("isobn", "norm.beta=-0.5", "norm.beta=-0.5: must be a finite number >= 0"),
        ("isobn", "norm.bias_correction=2", "norm.bias_correction=2: must be true or false"),
    ],
)
def test_norm_options_are_checked_where_the_norm_has_them(norm, override, line):
    assert [reported.strip() for reported in problems(f"norm={norm}", override)] == [line]


@pytest.mark.parametrize(
    ("norm", "line"),
    [
        (
            "isobn",
            "data.batch_size=1: must be >= 2 with norm=isobn: IsoBN skips training batches of "
            "fewer than 2 examples, so its running statistics would never update and the run, "
            "recorded as norm=isobn, would go without it (a batch of one has no variance); or use "
            "norm=none",
        ),
        (
            "whitening",
            "data.batch_size=1: must be >= 2 with norm=whitening: IterNormWhitening skips "
            "training batches of fewer than 2 examples, so its running statistics would never "
            "update and the run, recorded as norm=whitening, would go without it (a batch of one "
            "has no variance); or use norm=none",
        ),
        (
            "batchnorm",
            "data.batch_size=1: must be >= 2 with norm=batchnorm: BatchNorm1d raises on a training "
            "batch of fewer than 2 examples (a batch of one has no variance); or use norm=none",
        ),
    ],
)
def test_a_batch_of_one_is_refused_for_norms_with_statistics(norm, line):
    (reported,) = problems(f"norm={norm}", "data.batch_size=1")
    assert reported.strip() == line


def test_a_last_batch_of_one_is_refused_where_the_norm_raises_on_it():
    (reported,) = problems("norm=batchnorm", "data.drop_last=false")
    assert reported.strip() == (
        "data.drop_last=False: must be true with norm=batchnorm: the last training batch of each "
        "epoch holds the len(train) mod data.batch_size leftover examples, and BatchNorm1d raises "
        "on a training batch of fewer than 2 examples (the run stops in its first epoch where that "
        "leaves a batch of fewer than 2)"
    )


@pytest.mark.parametrize(
    "overrides",
    [
        ["norm=none", "data.batch_size=1", "data.drop_last=false"],  # no statistics to learn
        ["norm=isobn", "data.batch_size=2", "data.drop_last=false"],  # a last batch of one: skipped
        ["norm=whitening", "data.batch_size=2", "data.drop_last=false"],
        ["norm=batchnorm", "data.batch_size=2"],
    ],
)
def test_batches_every_norm_can_learn_from_pass(overrides):
    check_train_config(compose_train_config(overrides))


@pytest.fixture
def no_gpu(monkeypatch):
    """A machine whose torch sees no GPU, CUDA or Apple's."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    return monkeypatch


GPU_FIX = "use trainer=cpu, or trainer=default (accelerator auto: a GPU where there is one)"


@pytest.mark.parametrize(
    ("overrides", "value"),
    [
        (["trainer=gpu"], "'gpu'"),
        (["trainer=ddp"], "'gpu'"),
        (["trainer=cpu", "trainer.accelerator=cuda"], "'cuda'"),
        (["experiment=isobn_glue"], "'gpu'"),
    ],
)
def test_a_gpu_accelerator_without_a_gpu_names_the_value_the_build_and_the_fix(
    no_gpu, overrides, value
):
    no_gpu.setattr(torch.version, "cuda", None)
    (reported,) = problems(*overrides)
    assert reported.strip() == (
        f"trainer.accelerator={value}: needs a CUDA GPU, but torch sees none (this torch, "
        f"{torch.__version__}, is a CPU build: torch.version.cuda is None); {GPU_FIX}"
    )
    no_gpu.setattr(torch.version, "cuda", "12.8")
    (reported,) = problems(*overrides)
    assert reported.strip() == (
        f"trainer.accelerator={value}: needs a CUDA GPU, but torch sees none (check nvidia-smi "
        f"and CUDA_VISIBLE_DEVICES); {GPU_FIX}"
    )


def test_a_gpu_accelerator_passes_where_torch_sees_one(gpu_visible):
    for trainer in ("gpu", "ddp"):
        check_train_config(compose_train_config([f"trainer={trainer}"]))


def test_gpu_may_be_apples_mps_but_cuda_may_not(no_gpu):
    no_gpu.setattr(torch.backends.mps, "is_available", lambda: True)
    check_train_config(compose_train_config(["trainer=gpu"]))  # Lightning takes MPS for "gpu"
    (reported,) = problems("trainer.accelerator=cuda")
    assert reported.strip().startswith("trainer.accelerator='cuda': needs a CUDA GPU")


@pytest.mark.parametrize("trainer", ["default", "cpu", "cpu_bf16"])
def test_cpu_and_auto_accelerators_need_no_gpu(no_gpu, trainer):
    check_train_config(compose_train_config([f"trainer={trainer}"]))


@pytest.mark.parametrize(
    ("added", "line"),
    [
        (
            ["+optim.lrr=1e-3"],
            "  +optim.lrr=1e-3: no code reads optim.lrr, so the run would ignore it; did you mean "
            "optim.lr? (a key the config has takes no +)",
        ),
        (
            ["++optim.lrr=1e-3"],
            "  ++optim.lrr=1e-3: no code reads optim.lrr, so the run would ignore it; did you mean "
            "optim.lr?",
        ),
        (["norm=isobn", "+norm.momentm=0.1"], "did you mean norm.momentum?"),
        (["norm=isobn", "++norm.momentm=0.1"], "did you mean norm.momentum?"),
        (["reg=istar", "+reg.zetta=0.1"], "did you mean reg.zeta?"),
        (["+model.dropot=0.1"], "did you mean model.dropout?"),
        (["+data.batchsize=8"], "did you mean data.batch_size?"),
        (["+trainer.val_chek_interval=0.5"], "did you mean trainer.val_check_interval?"),
        (["+callbacks.isotropy.probe_sizes=8"], "did you mean callbacks.isotropy.probe_size?"),
        (
            ["+optim.x.y=1"],
            "no code reads optim.x, so the run would ignore it; the keys code reads",
        ),
    ],
)
def test_a_key_added_where_no_code_reads_it_names_the_nearest_known_key(added, line):
    (reported,) = problems(*added)
    assert line in reported


@pytest.mark.parametrize(
    "added",
    [
        ["+trainer.val_check_interval=0.5"],  # a Lightning Trainer argument the config leaves out
        ["++trainer.val_check_interval=0.5"],
        ["++optim.lr=1e-3"],  # ++ sets a key the config has
        ["norm=batchnorm", "+norm.affine=false"],  # an argument of the norm's own class
        ["+callbacks.mine={_target_:lightning.pytorch.callbacks.Timer}"],  # a callback of one's own
        ["+callbacks.mine._target_=lightning.pytorch.callbacks.Timer"],
    ],
)
def test_a_key_added_where_code_reads_it_passes(added):
    check_train_config(compose_train_config(added))


def test_every_problem_is_reported_at_once_one_line_each():
    reported = problems("seed=abc", "data.batch_size=0", "optim.lr=-1")
    assert reported == [
        f"  seed='abc': must be {SEED_RANGE}",
        "  data.batch_size=0: must be an integer >= 1",
        "  optim.lr=-1: must be a finite number > 0",
    ]


def test_norm_and_machine_problems_are_listed_with_the_others(no_gpu):
    reported = problems("seed=abc", "norm=isobn", "data.batch_size=1", "trainer=gpu")
    assert [line.split(":")[0] for line in reported] == [
        "  seed='abc'",
        "  data.batch_size=1",
        "  trainer.accelerator='gpu'",
    ]


def test_a_norm_without_batches_fails_the_run_before_the_model_loads(
    no_gpu, train_config, tmp_path
):
    cfg = train_config(
        "norm=isobn",
        "data.batch_size=1",
        "trainer.accelerator=gpu",
        f"model.name_or_path={NOT_A_MODEL}",
    )
    with pytest.raises(IsotuneError, match=r"data.batch_size=1: must be >= 2 with norm=isobn"):
        train(cfg)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "failed"
    assert "trainer.accelerator='gpu': needs a CUDA GPU" in results["error"]


def test_a_bad_value_fails_the_run_before_the_model_loads(train_config, tmp_path):
    with pytest.raises(IsotuneError, match=r"data.batch_size='abc': must be an integer >= 1"):
        train(train_config("data.batch_size=abc", f"model.name_or_path={NOT_A_MODEL}"))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "failed"
    assert results["error"].startswith("IsotuneError: Invalid config values")
    assert "data.batch_size='abc': must be an integer >= 1" in results["error"]
    assert results["steps"] == 0 and results["history"] == []


@pytest.mark.slow
def test_cli_reports_bad_values_without_a_traceback(tmp_path, glue_dir):
    result = run_cli(
        "seed=abc",
        "optim.lr=-1",
        f"model.name_or_path={NOT_A_MODEL}",
        f"paths.glue_dir={glue_dir}",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert result.returncode == 1
    output = result.stdout + result.stderr
    assert "seed='abc': must be an integer" in output
    assert "optim.lr=-1: must be a finite number > 0" in output
    assert "Traceback" not in output and "does not exist" not in output  # no model loaded
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "failed" and "optim.lr=-1" in results["error"]
