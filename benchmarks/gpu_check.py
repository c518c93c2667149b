"""What a user with a GPU runs first: how fast isotune trains there, whether IsoBN holds in bf16.

    python benchmarks/gpu_check.py --quick                   # within 5 minutes on one GPU
    python benchmarks/gpu_check.py --out gpu_check.md        # the full check, within 9 minutes

On one GPU (the first visible one; choose with CUDA_VISIBLE_DEVICES) it prints one Markdown table:
first, every batch shape of RTE through the model twice, padded to buckets of 32
(`data.pad_buckets`) and then each batch to its longest (a GPU pays a cost once per new input
shape, and length-grouped batches bring many: the first pass is what a run's first epoch pays; the
timed checks run after it, in the steady state); training throughput of `trainer=gpu` (bf16 mixed)
against a Hugging Face `Trainer` with bf16, MiniLM on RTE at batch 16 and 32 (the full check adds
BERT-base); IsoBN's statistics under bf16 against float32 on the same batches; the isobn / none
step-time ratio; the isotropy callback's share of an epoch; and, where Hydra and Optuna are
installed, 8 short jobs through `hydra/launcher=gpus` at jobs_per_gpu 1, 2 and 4: wall time, jobs
per hour, peak GPU memory per job.

It needs only torch, transformers and lightning besides isotune itself (`pip install --no-deps
-e .`; the sweeps also need what `train.py -m` imports): encoders are built from their configs
with random weights (throughput needs no pretrained weights), and RTE is read from `--glue-dir` /
GLUE_DIR when given, otherwise generated with RTE's length distribution. A check whose packages
are missing is listed as skipped, with the command that installs them. Without CUDA it stops with
exit status 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import logging
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from bench_throughput import conf
from gpu_measures import (
    ISOBN_TOLERANCE,
    TRAIN,
    callback_share,
    first_use_cost,
    isobn_precision,
    make_tokenizer,
    norm_step_ratio,
    rte_data,
    rte_glue_dir,
    save_random_encoder,
    throughput,
)
from gpu_sweep import run_sweep, sweep_command

from isotune.sweeps.gpu_slots import visible_gpus
from isotune.tracking.reporting import markdown_table

# Encoders built with random weights: their name in the table, the model config they stand in
# for (its pooling), and their BertConfig sizes (BertConfig's defaults are BERT-base's).
ARCHITECTURES = {
    "minilm": {
        "label": "MiniLM",
        "config": "model/minilm.yaml",
        "sizes": dict(
            hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536
        ),
    },
    "bert": {"label": "BERT-base", "config": "model/bert.yaml", "sizes": {}},
}
# check -> what it needs beyond torch, transformers and lightning: {module: pip name}
REQUIREMENTS = {
    "throughput": {"accelerate": "accelerate"},  # the HF Trainer
    "isotropy callback": {"matplotlib": "matplotlib"},  # its figures
    "sweep": {  # train.py -m: Hydra, our sweeper (Optuna), the gpus launcher's job shipping
        "hydra": "hydra-core",
        "dotenv": "python-dotenv",
        "matplotlib": "matplotlib",
        "optuna": "optuna",
        "cloudpickle": "cloudpickle",
    },
}


@dataclass(frozen=True)
class Settings:
    models: tuple[str, ...]  # ARCHITECTURES whose throughput is measured
    rounds: int  # throughput runs of ours and HF's, interleaved; medians reported
    steps: int  # timed steps per throughput run, after `warmup` untimed ones
    precision_batches: int  # batches folded into IsoBN's statistics, bf16 vs float32
    ratio_steps: int  # interleaved isobn / none training steps
    epoch_rounds: int  # RTE epochs with and without the isotropy callback, each
    sweep_batches: int | float  # trainer.limit_train_batches of a sweep job's one epoch
    budget_s: float  # the sweeps share what is left of it; one that would run over is stopped
    batch_sizes: tuple[int, ...] = (16, 32)
    warmup: int = 10
    sweep_jobs: int = 8
    jobs_per_gpu: tuple[int, ...] = (1, 2, 4)


STARTED = time.perf_counter()
# data.pad_buckets of the first-use check's bucketed pass: multiples of 32 up to max_length
BUCKETS = list(range(32, TRAIN["data"]["max_length"] + 1, 32))
SWEEP_RESERVE_S = 45  # kept for each later sweep (the first, one job at a time, takes longest)


QUICK = Settings(("minilm",), rounds=1, steps=40, precision_batches=20, ratio_steps=50,
                 epoch_rounds=1, sweep_batches=20, budget_s=280)  # fmt: skip
FULL = Settings(("minilm", "bert"), rounds=3, steps=100, precision_batches=50, ratio_steps=200,
                epoch_rounds=2, sweep_batches=1.0, budget_s=520)  # fmt: skip


# -- the table's rows, from measured numbers -----------------------------------------------------
def throughput_rows(label: str, batch_size: int, measured: dict[str, dict]) -> list[tuple]:
    rows = []
    for name, who in (("ours", "ours, `trainer=gpu` (bf16-mixed)"), ("HF", "HF `Trainer`, bf16")):
        speed, length = measured[name]["examples_per_s"], measured[name]["padded_length"]
        result = (
            f"{speed:.1f} examples/s, {speed * length:,.0f} padded tokens/s (length {length:.1f})"
        )
        rows.append(("throughput", f"{label}, batch {batch_size}: {who}", result))
    ratio = measured["ours"]["examples_per_s"] / measured["HF"]["examples_per_s"]
    return [*rows, ("throughput", f"{label}, batch {batch_size}: ours / HF", f"**{ratio:.2f}x**")]


def first_use_rows(
    label: str, cost: dict, batch_sizes: list[int], buckets: list[int] | None = None
) -> list[tuple]:
    sizes = " and ".join(str(size) for size in batch_sizes)
    padding = (
        "" if buckets is None else f" padded to `data.pad_buckets=[{','.join(map(str, buckets))}]`"
    )
    setting = (
        f"{label}, RTE's train and dev batches at batch {sizes}{padding}, each once: "
        f"{cost['batches']} batches, {cost['shapes']} shapes, forward (and backward in training)"
    )
    result = (
        f"first pass {cost['cold_s']:.1f} s, second {cost['warm_s']:.1f} s: "
        f"**{cost['cold_s'] / cost['warm_s']:.1f}x** (what a run's first epoch pays once; "
        "the checks below run after it)"
    )
    return [("first use", setting, result)]


def isobn_rows(precision: dict, batches: int, ratio: dict) -> list[tuple]:
    differences = ", ".join(
        f"{name} {value:.2g}" for name, value in precision["differences"].items()
    )
    verdict = "pass" if precision["passed"] else "**FAIL**"
    return [
        ("IsoBN under bf16", f"statistics after {batches} batches, bf16 autocast vs float32",
         f"{'/'.join(precision['dtypes'])}; relative difference {differences} "
         f"(tolerance {ISOBN_TOLERANCE}): {verdict}"),
        ("IsoBN step cost", f"isobn / none step time, median of {ratio['steps']} interleaved steps",
         f"**{ratio['ratio']:.3f}** (none: {ratio['none_ms']:.1f} ms a step)"),
    ]  # fmt: skip


def callback_rows(share: dict) -> list[tuple]:
    setting = (
        f"one RTE epoch, probe {share['probe_size']}, figures {'on' if share['figures'] else 'off'}"
    )
    result = f"{share['epoch_s']:.1f} s, with it {share['with_s']:.1f} s: **{share['share']:+.1%}**"
    return [("isotropy callback", setting, result)]


def sweep_rows(sweeps: dict[int, dict | None], jobs: int) -> list[tuple]:
    rows = []
    for jobs_per_gpu, sweep in sweeps.items():
        if sweep is None:
            result = "not run: the time budget was spent"
        elif sweep["returncode"] is None:
            result = (
                f"stopped at the time budget after {sweep['wall_s']:.0f} s, "
                f"{sweep['completed']}/{jobs} completed"
            )
        elif sweep["returncode"] != 0:
            result = f"failed (exit status {sweep['returncode']}); its output is printed above"
        else:
            rate = 3600 * sweep["completed"] / sweep["wall_s"]
            peak = "n/a" if sweep["peak_gib"] is None else f"{sweep['peak_gib']:.2f} GiB"
            result = (f"{sweep['wall_s']:.0f} s, **{rate:.0f} jobs/hour** ({sweep['completed']}/"
                      f"{jobs} completed); peak GPU memory per job {peak} (torch's reserved "
                      "memory; the CUDA context not included)")  # fmt: skip
        rows.append(("sweep", f"{jobs} jobs, `hydra.launcher.jobs_per_gpu={jobs_per_gpu}`", result))
    return rows


def skipped(check: str) -> list[tuple]:
    """A row saying ``check`` was skipped when a module it needs is not installed, else none."""
    absent = [
        pip for module, pip in REQUIREMENTS[check].items() if not importlib.util.find_spec(module)
    ]
    return [(check, "skipped", f"needs `pip install {' '.join(absent)}`")] if absent else []


def render(title: str, rows: list[tuple]) -> str:
    return f"{title}\n\n{markdown_table(('check', 'setting', 'result'), rows)}"


# -- the check, top to bottom --------------------------------------------------------------------
def progress(message: str) -> None:
    print(
        f"[gpu_check {time.perf_counter() - STARTED:.0f} s] {message}", file=sys.stderr, flush=True
    )


def check_first_use(
    models: dict, data: dict, bucketed: dict, device, architectures: dict
) -> list[tuple]:
    """Every model's first and second pass over every batch shape, before anything is timed:
    padded to ``BUCKETS`` first (its few shapes met cold), then each batch to its longest (those
    of its shapes the bucketed pass met are warm by then: a few of RTE's 128)."""
    rows, sizes = [], sorted(data)
    for name, model_cfg in models.items():
        label = architectures[name]["label"]
        for padded, buckets in ((bucketed, BUCKETS), (data, None)):
            how = "exact lengths" if buckets is None else "buckets"
            progress(f"first use, {label}, {how}: every batch shape, twice")
            cost = first_use_cost(model_cfg, [padded[size] for size in sizes], device)
            rows += first_use_rows(label, cost, sizes, buckets)
    return rows


def check_throughput(settings: Settings, models: dict, data: dict, device, architectures: dict):
    if rows := skipped("throughput"):
        return rows
    for name, size in itertools.product(settings.models, settings.batch_sizes):
        label = architectures[name]["label"]
        progress(f"throughput, {label}, batch {size}")
        measured = throughput(
            models[name], data[size], device, settings.warmup, settings.steps, settings.rounds
        )
        rows += throughput_rows(label, size, measured)
    return rows


def check_isobn(settings: Settings, model_cfg: dict, datamodule, device) -> list[tuple]:
    progress("IsoBN under bf16, and its step cost")
    batches = list(datamodule.train_dataloader())[: settings.precision_batches]
    precision = isobn_precision(model_cfg, batches, device)
    steps = settings.warmup + settings.ratio_steps
    stepped = list(itertools.islice(itertools.cycle(datamodule.train_dataloader()), steps))
    return isobn_rows(
        precision, len(batches), norm_step_ratio(model_cfg, stepped, device, settings.warmup)
    )


def check_callback(settings: Settings, model_cfg: dict, datamodule, device, work: Path):
    if rows := skipped("isotropy callback"):
        return rows
    progress("the isotropy callback's share of an epoch")
    return callback_rows(callback_share(model_cfg, datamodule, device, settings.epoch_rounds, work))


def check_sweeps(
    settings: Settings, model_dir: str, glue: Path, device, work: Path, deadline: float
):
    """The sweeps one after another, each given the time left but what the next ones keep."""
    if rows := skipped("sweep"):
        return rows
    sweeps = dict.fromkeys(settings.jobs_per_gpu)
    for left, jobs_per_gpu in zip(range(len(sweeps), 0, -1), settings.jobs_per_gpu, strict=True):
        timeout = deadline - time.perf_counter() - SWEEP_RESERVE_S * (left - 1)
        if timeout < 30:
            continue
        progress(f"sweep, jobs_per_gpu={jobs_per_gpu} (stopped after {timeout:.0f} s)")
        sweep_dir = work / f"sweep-{jobs_per_gpu}"
        command = sweep_command(
            jobs_per_gpu, settings.sweep_jobs, settings.sweep_batches, Path(model_dir), glue,
            sweep_dir, trainer="gpu" if device.type == "cuda" else "cpu",
        )  # fmt: skip
        sweeps[jobs_per_gpu] = sweep = run_sweep(command, sweep_dir, timeout)
        if sweep["returncode"]:
            print(sweep["output"].read_text()[-4000:], file=sys.stderr)
    return sweep_rows(sweeps, settings.sweep_jobs)


def run_checks(
    settings: Settings, glue_dir: str | None, device: torch.device, architectures=ARCHITECTURES
) -> str:
    """Every check of ``settings`` on ``device``, as the Markdown table."""
    deadline = time.perf_counter() + settings.budget_s
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        work = Path(tmp)
        tokenizer = make_tokenizer()
        glue = rte_glue_dir(glue_dir, tokenizer, work)
        models = {}
        for name in dict.fromkeys(["minilm", *settings.models]):
            folder = save_random_encoder(work / name, tokenizer, architectures[name]["sizes"])
            models[name] = {**conf(architectures[name]["config"]), "name_or_path": str(folder)}
        default_batch = TRAIN["data"]["batch_size"]  # the isobn, callback and sweep checks'
        sizes = {default_batch, *settings.batch_sizes}
        data = {size: rte_data(tokenizer, glue, size) for size in sizes}
        bucketed = {size: rte_data(tokenizer, glue, size, BUCKETS) for size in sizes}
        minilm = models["minilm"]
        rows = [
            *check_first_use(models, data, bucketed, device, architectures),
            *check_throughput(settings, models, data, device, architectures),
            *check_isobn(settings, minilm, data[default_batch], device),
            *check_callback(settings, minilm, data[default_batch], device, work / "isotropy"),
            *check_sweeps(settings, minilm["name_or_path"], glue, device, work, deadline),
        ]
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    source = f"RTE from {glue_dir}" if glue_dir else "generated RTE"
    return render(f"## GPU check: {where}, torch {torch.__version__}, {source}", rows)


NO_CUDA = (
    "gpu_check.py measures training on a GPU, but torch sees no CUDA device here (torch {version},"
    " {build}). Fix: run it on a machine with an NVIDIA GPU and a CUDA build of torch "
    "(pytorch.org/get-started/locally); on CPU, benchmarks/bench_throughput.py compares our "
    "trainer with the HF Trainer."
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="within 5 minutes (full: within 9)")
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    parser.add_argument(
        "--glue-dir",
        default=os.environ.get("GLUE_DIR"),
        help="GLUE folder (default: $GLUE_DIR); without one, RTE is generated",
    )
    args = parser.parse_args(argv)
    args.settings = QUICK if args.quick else FULL
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    gpus = visible_gpus()  # without initialising CUDA, so that the next line still takes effect
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus[0]  # one GPU: HF's Trainer would take them all
    if not gpus or not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        print(NO_CUDA.format(version=torch.__version__, build=build), file=sys.stderr)
        raise SystemExit(2)
    logging.disable(logging.WARNING)
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    table = run_checks(args.settings, args.glue_dir, torch.device("cuda", 0))
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
