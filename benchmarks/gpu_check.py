"""What a user with a GPU runs first: how fast isotune trains there, and where a job's time goes.

    python benchmarks/gpu_check.py --quick                   # within 5 minutes on one GPU
    python benchmarks/gpu_check.py --out gpu_check.md        # the full check, within 9 minutes

On one GPU (the first visible one; choose with CUDA_VISIBLE_DEVICES) it prints one Markdown table,
its parts in this order, each planned a share of the time (``Settings.plan``):

- **sweeps**: jobs through ``hydra/launcher=gpus`` at jobs_per_gpu 1, 2 and 4, each sweep to
  its end (the full check: 6 real RTE jobs of 3 whole epochs at the defaults; --quick: 8 jobs of
  one epoch of 20 batches): wall time, jobs per hour, peak GPU memory per job; and from the
  one-worker sweep's logs, a warm worker's start-up (a job composed by Hydra, to its first log
  line) and a warm job; where a SLURM answers (``bash scripts/local_slurm.sh start``), the
  largest jobs_per_gpu's sweep again, packed into one SLURM allocation (docs/sweeps.md), in what
  time the sweeps before left;
- **first use**: every batch shape of RTE through the model, the first pass and a warm one,
  padded to each batch's longest and to buckets of 32 (``data.pad_buckets``), with cuDNN
  attention on and off: four variants, their first passes in turn, then their warm passes
  interleaved (a GPU plans cuDNN attention once per new shape: the first pass is what a run's
  first epoch pays once);
- **measures**: the isotropy callback's measures of a probe-sized view on the GPU and on the CPU,
  equal within 1e-6 relative, and their seconds;
- **isotropy callback**: its share of an RTE epoch;
- **throughput**: ours with foreach and with fused AdamW, ours compiled (``compile=true``
  on buckets of 32), and a Hugging Face ``Trainer`` with bf16, interleaved, MiniLM on RTE;
- **IsoBN**: its statistics under bf16 against float32, and its step cost.

A part that fails, or whose packages are missing, or for which too little time is left, is a row
saying so; the rest still run. It needs only torch, transformers and lightning besides isotune
itself (``pip install --no-deps -e .``; the sweeps also need what ``train.py -m`` imports):
encoders are built from their configs with random weights, and RTE is read from ``--glue-dir`` /
GLUE_DIR when given, otherwise generated with RTE's length distribution. Without CUDA it stops
with exit status 2; ``--dry-run`` runs every part on the CPU with a tiny encoder and few steps
(what the tests run: it checks that the parts run, its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import logging
import os
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from bench_sweep import read_jobs
from bench_throughput import conf
from gpu_measures import (
    ISOBN_TOLERANCE,
    TRAIN,
    callback_share,
    first_use_variants,
    isobn_precision,
    make_tokenizer,
    measures_agreement,
    norm_step_ratio,
    rte_data,
    rte_glue_dir,
    save_random_encoder,
    throughput,
)
from gpu_sweep import packed_on_slurm, run_sweep, sweep_command

from isotune.errors import IsotuneError
from isotune.model.compiling import check_compile_runs
from isotune.sweeps.gpu_slots import visible_gpus
from isotune.tracking.reporting import markdown_table

# Encoders built with random weights: their name in the table, the model config they stand in
# for (its pooling), and their BertConfig sizes.
ARCHITECTURES = {
    "minilm": {
        "label": "MiniLM",
        "config": "model/minilm.yaml",
        "sizes": dict(
            hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536
        ),
    },
}
TINY_ARCHITECTURES = {  # --dry-run's
    "minilm": {
        "label": "tiny BERT",
        "config": "model/minilm.yaml",
        "sizes": dict(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
        ),
    },
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
JOBS_PER_GPU = (1, 2, 4)


@dataclass(frozen=True)
class Settings:
    rounds: int  # throughput runs of each variant, interleaved; medians reported
    steps: int  # timed steps per throughput run, after `warmup` untimed ones
    warm_rounds: int  # warm passes of each first-use variant, interleaved; median reported
    precision_batches: int  # batches folded into IsoBN's statistics, bf16 vs float32
    ratio_steps: int  # interleaved isobn / none training steps
    epoch_rounds: int  # RTE epochs with and without the isotropy callback, each
    sweep_epochs: int  # trainer.max_epochs of a sweep job
    sweep_batches: int | float  # trainer.limit_train_batches of a sweep job (1.0: all)
    plan: dict[str, float]  # seconds each part is planned to take, in the order they run
    budget_s: float  # from the start; a part with less left than it needs is a row saying so
    compile: bool = True  # throughput of ours compiled too
    batch_sizes: tuple[int, ...] = (16,)  # first use at each (together); throughput at each
    warmup: int = 10
    sweep_jobs: int = 8
    jobs_per_gpu: tuple[int, ...] = JOBS_PER_GPU


def plan(sweeps: dict[int, float], **parts: float) -> dict[str, float]:
    """Planned seconds of the set-up, the sweeps (by jobs per GPU: ``sweep <k>``) and the
    in-process parts, in the order they run."""
    named = {sweep_part(jobs_per_gpu): seconds for jobs_per_gpu, seconds in sweeps.items()}
    return {"set-up": parts.pop("setup"), **named, **parts}


def sweep_part(jobs_per_gpu: int) -> str:
    return f"sweep {jobs_per_gpu}"


# Plans from the quick check on an H200 (docs/performance.md: a warm pass over RTE's batches at
# batch 16 and 32 3.8 s, the first 41.2 s, 0.3 s a new shape; a one-epoch job of 20 batches 13 s
# in a reused worker; 20 ms a MiniLM step). A 3-epoch RTE job is 468 steps (about 10 s) beside
# that job's 13 s, and each worker's first job pays the first use of RTE's shapes (about 25 s):
# 6 jobs at 1 per GPU about 135 s, at 2 (three a worker, sharing the GPU) 85 s, at 4 75 s. The
# compiled throughput run compiles for a minute or more (docs/performance.md's sources: 1-2.5 min).
QUICK = Settings(rounds=1, steps=40, warm_rounds=1, precision_batches=20, ratio_steps=50,
                 epoch_rounds=1, sweep_epochs=1, sweep_batches=20, budget_s=280, compile=False,
                 batch_sizes=(16, 32),
                 plan=plan({1: 60, 2: 40, 4: 40}, setup=20, first_use=55, measures=3, callback=15,
                           throughput=30, isobn=10))  # fmt: skip
FULL = Settings(rounds=2, steps=100, warm_rounds=2, precision_batches=20, ratio_steps=50,
                epoch_rounds=1, sweep_epochs=3, sweep_batches=1.0, budget_s=525, sweep_jobs=6,
                plan=plan({1: 135, 2: 85, 4: 75}, setup=20, first_use=65, measures=5, callback=15,
                          throughput=100, isobn=10))  # fmt: skip
DRY = Settings(rounds=1, steps=2, warm_rounds=1, precision_batches=2, ratio_steps=2,
               epoch_rounds=1, sweep_epochs=1, sweep_batches=2, budget_s=3600, warmup=1,
               batch_sizes=(8,), sweep_jobs=2, jobs_per_gpu=(2,), compile=False,
               plan=plan({2: 600}, setup=60, first_use=120, measures=10, callback=60,
                         throughput=120, isobn=30))  # fmt: skip
BUCKETS = list(range(32, TRAIN["data"]["max_length"] + 1, 32))  # data.pad_buckets of 32s
MEASURES_TOLERANCE = 1e-6  # relative, the GPU's measures against the CPU's


# -- time ----------------------------------------------------------------------------------------
def allowance(part: str, planned: dict[str, float], left_s: float) -> float:
    """Seconds ``part`` may take with ``left_s`` left: all of it but the plans of the sweeps after
    it (a sweep is run to its end or not at all: it gets the slack the parts before it left) and
    half the plans of the in-process parts after it (those are shorter and skipped first)."""
    later = list(planned)[list(planned).index(part) + 1 :]
    sweeps = [p for p in later if p.startswith("sweep ")]
    return left_s - sum(planned[p] if p in sweeps else planned[p] / 2 for p in later)


class Clock:
    """The check's budget: what is left of it, and whether a part still fits."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.deadline = time.perf_counter() + settings.budget_s

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def allowance(self, part: str) -> float:
        return allowance(part, self.settings.plan, self.left())


# -- the table's rows, from measured numbers -----------------------------------------------------
def throughput_rows(label: str, batch_size: int, measured: dict[str, dict]) -> list[tuple]:
    rows = []
    for name, found in measured.items():
        speed, length = found["examples_per_s"], found["padded_length"]
        who = "HF `Trainer`, bf16 (its default: fused AdamW)" if name == "HF" else name
        result = (
            f"{speed:.1f} examples/s, {speed * length:,.0f} padded tokens/s (length {length:.1f})"
        )
        rows.append(("throughput", f"{label}, batch {batch_size}: {who}", result))
    hf = measured["HF"]["examples_per_s"]
    for name in (name for name in measured if name != "HF"):
        ratio = measured[name]["examples_per_s"] / hf
        setting = f"{label}, batch {batch_size}: {name} / HF"
        rows.append(("throughput", setting, f"**{ratio:.2f}x**"))
    return rows


def first_use_rows(label: str, costs: dict[tuple[str, bool], dict], sizes: list[int]) -> list:
    rows = []
    for (padding, cudnn), cost in costs.items():
        how = "each batch to its longest" if padding == "exact" else (
            f"`data.pad_buckets=[{','.join(map(str, BUCKETS))}]`"
        )  # fmt: skip
        setting = (
            f"{label}, RTE's train and dev batches at batch {' and '.join(map(str, sizes))}, "
            f"{how}, cuDNN attention {'on' if cudnn else 'off'}: {cost['batches']} batches, "
            f"{cost['shapes']} shapes"
        )
        result = (
            f"first pass {cost['cold_s']:.1f} s, warm {cost['warm_s']:.1f} s: "
            f"**{cost['cold_s'] / cost['warm_s']:.2f}x**"
        )
        rows.append(("first use", setting, result))
    return rows


def measures_rows(found: dict, device_name: str) -> list[tuple]:
    verdict = "pass" if found["max_relative"] <= MEASURES_TOLERANCE else "**FAIL**"
    setting = (
        f"a view of {found['points']} x {found['dims']}, every scalar the callback logs, on "
        f"{device_name} and on the CPU"
    )
    result = (
        f"largest relative difference {found['max_relative']:.1e} over {found['scalars']} "
        f"scalars (allowed {MEASURES_TOLERANCE:g}): {verdict}; {found['device_s'] * 1000:.0f} ms "
        f"there, {found['cpu_s'] * 1000:.0f} ms on the CPU"
    )
    return [("isotropy measures", setting, result)]


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


def sweep_rows(sweeps: dict[int, dict | None], jobs: int, epochs: int, batches) -> list[tuple]:
    what = "all" if batches == 1.0 else str(batches)
    rows = []
    for jobs_per_gpu, sweep in sweeps.items():
        if sweep is None:
            result = "not run: the time budget was spent"
        elif sweep["returncode"] is None:
            result = (
                f"stopped at its share of the time budget after {sweep['wall_s']:.0f} s, "
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
        setting = (
            f"{jobs} RTE jobs of {epochs} epoch{'s' if epochs > 1 else ''} ({what} training "
            f"batches), `hydra.launcher.jobs_per_gpu={jobs_per_gpu}`"
        )
        rows.append(("sweep", setting, result))
    return rows


def warm_worker_rows(warm: list[float], start_up: list[float]) -> list[tuple]:
    """A warm worker's start-up and job, from the one-worker sweep's job logs."""
    if not warm:
        return [("warm worker", "the one-worker sweep's jobs", "n/a: fewer than 2 completed")]

    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"

    return [
        ("warm worker", f"a job's start-up in a reused worker (Hydra composing it, to its first "
         f"log line), median of {len(start_up)}", spread(start_up)),
        ("warm worker", "a warm job, from the previous job's last log line to its own",
         spread(warm)),
    ]  # fmt: skip


def not_run(part: str, left_s: float, planned_s: float) -> list[tuple]:
    return [(part, "not run", f"{left_s:.0f} s left of the budget, {planned_s:.0f} s planned")]


def skipped(check: str) -> list[tuple]:
    """A row saying ``check`` was skipped when a module it needs is not installed, else none."""
    absent = [
        pip for module, pip in REQUIREMENTS[check].items() if not importlib.util.find_spec(module)
    ]
    return [(check, "skipped", f"needs `pip install {' '.join(absent)}`")] if absent else []


def guarded(check: str, run: Callable[[], list[tuple]]) -> list[tuple]:
    """``run``'s rows, or one row saying it failed and why (its traceback to stderr): a part
    that cannot run on this machine leaves the others their time and their rows."""
    try:
        return run()
    except Exception as error:  # whatever it was, the check goes on
        traceback.print_exc()
        first = (str(error).strip().splitlines() or [""])[0][:200]
        return [(check, "failed", f"{type(error).__name__}: {first}")]


def render(title: str, rows: list[tuple]) -> str:
    return f"{title}\n\n{markdown_table(('check', 'setting', 'result'), rows)}"


# -- the check, top to bottom --------------------------------------------------------------------
STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(
        f"[gpu_check {time.perf_counter() - STARTED:.0f} s] {message}", file=sys.stderr, flush=True
    )


def check_sweeps(
    settings: Settings, model_dir: str, glue: Path, device, work: Path, clock: Clock
) -> list[tuple]:
    """The sweeps one after another, each run to its end within its allowance."""
    if rows := skipped("sweep"):
        return rows
    sweeps = dict.fromkeys(settings.jobs_per_gpu)
    for jobs_per_gpu in settings.jobs_per_gpu:
        timeout = clock.allowance(sweep_part(jobs_per_gpu))
        if timeout < 30:
            continue
        progress(f"sweep, jobs_per_gpu={jobs_per_gpu} (stopped after {timeout:.0f} s)")
        sweep_dir = work / f"sweep-{jobs_per_gpu}"
        command = sweep_command(
            jobs_per_gpu, settings.sweep_jobs, settings.sweep_batches, Path(model_dir), glue,
            sweep_dir, trainer="gpu" if device.type == "cuda" else "cpu",
            epochs=settings.sweep_epochs,
        )  # fmt: skip
        sweeps[jobs_per_gpu] = sweep = run_sweep(command, sweep_dir, timeout)
        if sweep["returncode"]:
            print(sweep["output"].read_text()[-4000:], file=sys.stderr)
    rows = sweep_rows(sweeps, settings.sweep_jobs, settings.sweep_epochs, settings.sweep_batches)
    rows += packed_sweep_rows(settings, model_dir, glue, device, work, clock)
    one_worker = sweeps.get(1)
    if one_worker is not None:
        completed = one_worker["completed"]
        warm, start_up = read_jobs(work / "sweep-1", completed) if completed >= 2 else ([], [])
        rows += warm_worker_rows(warm, start_up)
    return rows


def packed_sweep_rows(
    settings: Settings, model_dir: str, glue: Path, device, work: Path, clock: Clock
) -> list[tuple]:
    """The largest jobs_per_gpu's sweep again, packed into one SLURM allocation (a worker pool
    in a SLURM job), where a SLURM answers; a row saying why not otherwise."""
    jobs_per_gpu = max(settings.jobs_per_gpu)
    launcher = packed_on_slurm()
    if launcher is None:
        return [("sweep", "packed on SLURM", "not run: no SLURM answers here (sinfo); as root, "
                 "bash scripts/local_slurm.sh start")]  # fmt: skip
    timeout = clock.allowance(sweep_part(jobs_per_gpu))
    if timeout < 30:
        return [("sweep", "packed on SLURM", "not run: the time budget was spent")]
    progress(f"sweep packed on SLURM, jobs_per_gpu={jobs_per_gpu} (stopped after {timeout:.0f} s)")
    sweep_dir = work / f"sweep-packed-{jobs_per_gpu}"
    command = sweep_command(
        jobs_per_gpu, settings.sweep_jobs, settings.sweep_batches, Path(model_dir), glue,
        sweep_dir, trainer="gpu" if device.type == "cuda" else "cpu",
        epochs=settings.sweep_epochs, launcher=launcher,
    )  # fmt: skip
    sweep = run_sweep(command, sweep_dir, timeout)
    if sweep["returncode"]:
        print(sweep["output"].read_text()[-4000:], file=sys.stderr)
    rows = sweep_rows(
        {jobs_per_gpu: sweep}, settings.sweep_jobs, settings.sweep_epochs, settings.sweep_batches
    )
    return [(check, f"{what}, packed into one SLURM allocation", got) for check, what, got in rows]


def in_process_parts(
    settings: Settings, minilm: dict, label: str, data: dict, bucketed: dict, device, work: Path
) -> dict:
    """The parts run in this process, by their plan's name: the check's name and a function of no
    arguments giving its rows."""
    default_batch = TRAIN["data"]["batch_size"]
    sizes = sorted(settings.batch_sizes)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "the CPU"

    def first_use() -> list[tuple]:
        padded = {
            "exact": [data[size] for size in sizes],
            "buckets": [bucketed[size] for size in sizes],
        }
        costs = first_use_variants(minilm, padded, device, settings.warm_rounds)
        return first_use_rows(label, costs, sizes)

    def measures() -> list[tuple]:
        return measures_rows(measures_agreement(device), device_name)

    def callback() -> list[tuple]:
        if rows := skipped("isotropy callback"):
            return rows
        share = callback_share(
            minilm, data[default_batch], device, settings.epoch_rounds, work / "isotropy"
        )
        return callback_rows(share)

    def throughput_part() -> list[tuple]:
        if rows := skipped("throughput"):
            return rows
        rows, compiled = [], settings.compile
        if compiled:
            try:  # where inductor cannot run, the other variants still can
                check_compile_runs(device)
            except IsotuneError as error:
                rows.append(("throughput", "ours, compiled", f"not run: {error}"))
                compiled = False
        for size in sizes:
            progress(f"throughput, batch {size}")
            measured = throughput(
                minilm, data[size], device, settings.warmup, settings.steps, settings.rounds,
                bucketed=bucketed[size], compiled=compiled,
            )  # fmt: skip
            rows += throughput_rows(label, size, measured)
        return rows

    def isobn() -> list[tuple]:
        batches = list(data[default_batch].train_dataloader())[: settings.precision_batches]
        precision = isobn_precision(minilm, batches, device)
        steps = settings.warmup + settings.ratio_steps
        loader = data[default_batch].train_dataloader()
        stepped = list(itertools.islice(itertools.cycle(loader), steps))
        ratio = norm_step_ratio(minilm, stepped, device, settings.warmup)
        return isobn_rows(precision, len(batches), ratio)

    return {
        "first_use": ("first use", first_use),
        "measures": ("isotropy measures", measures),
        "callback": ("isotropy callback", callback),
        "throughput": ("throughput", throughput_part),
        "isobn": ("IsoBN", isobn),
    }


def run_checks(
    settings: Settings, glue_dir: str | None, device: torch.device, architectures=ARCHITECTURES
) -> str:
    """Every part of ``settings`` on ``device``, in the order of its plan, as the Markdown table."""
    clock = Clock(settings)
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        work = Path(tmp)
        progress("set-up: tokenizer, a random encoder, RTE's batches")
        tokenizer = make_tokenizer()
        glue = rte_glue_dir(glue_dir, tokenizer, work)
        minilm = architectures["minilm"]
        folder = save_random_encoder(work / "minilm", tokenizer, minilm["sizes"])
        model_cfg = {**conf(minilm["config"]), "name_or_path": str(folder)}
        sizes = {TRAIN["data"]["batch_size"], *settings.batch_sizes}
        data = {size: rte_data(tokenizer, glue, size) for size in sizes}
        bucketed = {size: rte_data(tokenizer, glue, size, BUCKETS) for size in sizes}
        rows = guarded(
            "sweep", lambda: check_sweeps(settings, str(folder), glue, device, work, clock)
        )
        parts = in_process_parts(settings, model_cfg, minilm["label"], data, bucketed, device, work)
        for name, (check, run) in parts.items():
            planned = settings.plan[name]
            if clock.allowance(name) < planned:
                rows += not_run(check, clock.left(), planned)
                continue
            progress(check)
            rows += guarded(check, run)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    source = f"RTE from {glue_dir}" if glue_dir else "generated RTE"
    return render(f"## GPU check: {where}, torch {torch.__version__}, {source}", rows)


NO_CUDA = (
    "gpu_check.py measures training on a GPU, but torch sees no CUDA device here (torch {version},"
    " {build}). Fix: run it on a machine with an NVIDIA GPU and a CUDA build of torch "
    "(pytorch.org/get-started/locally); on CPU, benchmarks/bench_throughput.py compares our "
    "trainer with the HF Trainer, and --dry-run checks that every part of this one runs."
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--quick", action="store_true", help="within 5 minutes (full: within 9)")
    how.add_argument(
        "--dry-run",
        action="store_true",
        help="every part on the CPU with a tiny encoder and few steps (the tests' mode)",
    )
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    parser.add_argument(
        "--glue-dir",
        default=os.environ.get("GLUE_DIR"),
        help="GLUE folder (default: $GLUE_DIR); without one, RTE is generated",
    )
    args = parser.parse_args(argv)
    args.settings = DRY if args.dry_run else QUICK if args.quick else FULL
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    quiet()
    if args.dry_run:
        table = run_checks(args.settings, args.glue_dir, torch.device("cpu"), TINY_ARCHITECTURES)
    else:
        gpus = visible_gpus()  # without initialising CUDA, so that the next line takes effect
        if gpus:
            os.environ["CUDA_VISIBLE_DEVICES"] = gpus[0]  # one GPU: HF's Trainer takes them all
        if not gpus or not torch.cuda.is_available():
            build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
            print(NO_CUDA.format(version=torch.__version__, build=build), file=sys.stderr)
            raise SystemExit(2)
        table = run_checks(args.settings, args.glue_dir, torch.device("cuda", 0))
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


def quiet() -> None:
    """Library logging, warnings and progress bars off; the Hub offline."""
    logging.disable(logging.WARNING)
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


if __name__ == "__main__":
    main()
