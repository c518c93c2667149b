"""Train-step throughput on MiniLM / RTE at batch 16: norm=none vs batchnorm vs isobn, and ours vs
a plain Hugging Face ``Trainer`` fine-tuning the same model on the same data; and bf16 autocast
(``trainer=cpu_bf16``) vs float32 steps.

Timings on a shared machine are noisy, so every configuration runs in each of ``--rounds``
interleaved rounds and the table reports medians and ratios from this one run.

    GLUE_DIR=../shared/data/glue python benchmarks/bench_throughput.py --steps 30 --rounds 3
    GLUE_DIR=../shared/data/glue python benchmarks/bench_throughput.py --norms-only   # IsoBN cost
    GLUE_DIR=../shared/data/glue python benchmarks/bench_throughput.py --bf16-only    # bf16 on CPU
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import lightning as L
import torch
import yaml
from transformers import (
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    PrinterCallback,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from isotune.data import GLUEDataModule, load_split
from isotune.data.tasks import TaskSpec
from isotune.model.classifier import GLUEClassifier
from isotune.model.encoders import load_tokenizer, resolve_model_path
from isotune.norms.registry import NORMS as NORM_REGISTRY
from isotune.norms.registry import IsoBN

CONF = Path(__file__).resolve().parents[1] / "conf"
NORMS = tuple(NORM_REGISTRY)  # every registered norm, the baseline none first


def conf(path: str) -> dict:
    """A file of conf/ as plain data. PyYAML, not OmegaConf: gpu_check.py imports this module on
    machines without Hydra (tests/test_gpu_check.py checks that both read every config alike)."""
    return yaml.safe_load((CONF / path).read_text())


def quiet_offline_glue_dir() -> str:
    """GLUE_DIR from the environment; library logging and warnings off, the Hub offline."""
    glue_dir = os.environ.get("GLUE_DIR")
    if not glue_dir:
        raise SystemExit("Set GLUE_DIR to the GLUE data (for example ../shared/data/glue).")
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return glue_dir


class StepClock:
    """Seconds and examples of the optimizer steps after ``warmup`` (data loading excluded)."""

    def __init__(self, warmup: int):
        self.warmup = warmup
        self.steps = 0
        self.seconds = 0.0
        self.examples = 0
        self.tokens = 0
        self._start = 0.0

    def start(self) -> None:
        self._start = time.perf_counter()

    def stop(self, examples: int, padded_length: int) -> None:
        if self.steps >= self.warmup:
            self.seconds += time.perf_counter() - self._start
            self.examples += examples
            self.tokens += examples * padded_length
        self.steps += 1

    def result(self) -> dict[str, float]:
        return {
            "examples_per_s": self.examples / self.seconds,
            "padded_length": self.tokens / self.examples,
        }


class LightningClock(L.Callback):
    def __init__(self, clock: StepClock):
        self.clock = clock

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.clock.start()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.clock.stop(*batch["input_ids"].shape)


class HFClock(TrainerCallback):
    """Times each HF step; the batch shape is read by the collator wrapper below."""

    def __init__(self, clock: StepClock):
        self.clock = clock
        self.shape = (0, 0)

    def on_step_begin(self, args, state, control, **kwargs):
        self.clock.start()

    def on_step_end(self, args, state, control, **kwargs):
        self.clock.stop(*self.shape)


def run_ours(norm: str, args, glue_dir: str) -> dict[str, float]:
    task = TaskSpec.from_config(conf("task/rte.yaml"))
    model_cfg = conf("model/minilm.yaml")
    datamodule = GLUEDataModule(
        task,
        load_tokenizer(model_cfg["name_or_path"]),
        glue_dir=glue_dir,
        max_length=args.max_length,
        batch_size=args.batch_size,
        seed=0,
    )
    optim = conf("train.yaml")["optim"]
    model = GLUEClassifier(
        task=conf("task/rte.yaml"), model=model_cfg, norm=conf(f"norm/{norm}.yaml"), optim=optim
    )
    clock = StepClock(args.warmup)
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=args.warmup + args.steps,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        gradient_clip_val=1.0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[LightningClock(clock)],
    )
    trainer.fit(model, datamodule=datamodule)
    return clock.result()


def run_hf_trainer(args, glue_dir: str, pad_to_max_length: bool) -> dict[str, float]:
    task = TaskSpec.from_config(conf("task/rte.yaml"))
    path = resolve_model_path(conf("model/minilm.yaml")["name_or_path"])
    tokenizer = load_tokenizer(path)
    examples = load_split(task, "train", glue_dir)
    padding = "max_length" if pad_to_max_length else False
    encoded = tokenizer(
        [ex["sentence1"] for ex in examples],
        [ex["sentence2"] for ex in examples],
        truncation=True,
        max_length=args.max_length,
        padding=padding,
    )
    dataset = [
        {**{key: values[i] for key, values in encoded.items()}, "labels": ex["label"]}
        for i, ex in enumerate(examples)
    ]
    return timed_hf_trainer(
        StepClock(args.warmup),
        path,
        tokenizer,
        dataset,
        batch_size=args.batch_size,
        max_steps=args.warmup + args.steps,
        learning_rate=5e-5,
        warmup_steps=round(0.06 * (args.warmup + args.steps)),
    )


def timed_hf_trainer(
    clock: StepClock,
    model_dir: str,
    tokenizer,
    dataset,
    *,
    batch_size: int,
    max_steps: int,
    learning_rate: float,
    warmup_steps: int,
    bf16: bool = False,
    use_cpu: bool = True,
) -> dict[str, float]:
    """A Hugging Face ``Trainer`` fine-tuning ``model_dir`` on ``dataset`` at its defaults
    otherwise (random batches, each padded to its longest example), ``clock`` timing its steps;
    the clock's result. bench_throughput and gpu_check compare our training loop with this."""
    timer = HFClock(clock)
    pad = DataCollatorWithPadding(tokenizer)

    def collate(features):
        batch = pad([{k: v for k, v in feature.items() if k != "idx"} for feature in features])
        timer.shape = tuple(batch["input_ids"].shape)
        return batch

    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    with tempfile.TemporaryDirectory() as output_dir:
        arguments = TrainingArguments(
            output_dir=output_dir,
            per_device_train_batch_size=batch_size,
            max_steps=max_steps,
            learning_rate=learning_rate,
            warmup_steps=warmup_steps,
            max_grad_norm=1.0,
            bf16=bf16,
            use_cpu=use_cpu,
            dataloader_drop_last=True,
            save_strategy="no",
            logging_strategy="no",
            report_to=[],
            seed=0,
            disable_tqdm=True,
        )
        trainer = Trainer(
            model=model,
            args=arguments,
            data_collator=collate,
            train_dataset=dataset,
            callbacks=[timer],
        )
        trainer.remove_callback(PrinterCallback)  # prints the run's metrics where the table goes
        trainer.train()
    return clock.result()


def interleaved_step_seconds(
    models: dict[str, torch.nn.Module],
    loss: Callable[[torch.nn.Module, dict], torch.Tensor],
    batches: Iterable[dict],
    warmup: int,
    steps: int,
    optimizers: dict[str, torch.optim.Optimizer] | None = None,
) -> dict[str, list[float]]:
    """Seconds of each model's training step (``loss``, backward, optimizer step) on the same
    batch, the models' order rotated at every batch; the first ``warmup`` batches are not timed.
    Each model's optimizer from ``optimizers``, by default AdamW at 5e-5.

    Interleaving cancels the drift of a shared machine that separate runs suffer from.
    """
    names = tuple(models)
    if optimizers is None:
        optimizers = {name: torch.optim.AdamW(models[name].parameters(), lr=5e-5) for name in names}
    seconds: dict[str, list[float]] = {name: [] for name in names}
    batches = iter(batches)
    for step in range(warmup + steps):
        batch = next(batches)
        for name in names[step % len(names) :] + names[: step % len(names)]:
            start = time.perf_counter()
            loss(models[name], batch).backward()
            optimizers[name].step()
            optimizers[name].zero_grad()
            if step >= warmup:
                seconds[name].append(time.perf_counter() - start)
    return seconds


def median_ratios(seconds: dict[str, list[float]], baseline: str) -> dict[str, float]:
    """Per name, the median over steps of its step time over the baseline's on the same batch."""
    return {
        name: statistics.median(t / base for t, base in zip(times, seconds[baseline], strict=True))
        for name, times in seconds.items()
    }


def rte_datamodule(args, glue_dir: str) -> GLUEDataModule:
    """The default run's data (RTE, MiniLM's tokenizer, length-grouped, seed 0), set up to fit."""
    datamodule = GLUEDataModule(
        TaskSpec.from_config(conf("task/rte.yaml")),
        load_tokenizer(conf("model/minilm.yaml")["name_or_path"]),
        glue_dir=glue_dir,
        max_length=args.max_length,
        batch_size=args.batch_size,
        seed=0,
    )
    datamodule.setup("fit")
    return datamodule


def rte_train_batches(args, glue_dir: str):
    """The default run's training batches (RTE, length-grouped, seed 0)."""
    return rte_datamodule(args, glue_dir).train_dataloader()


def seeded_classifier(norm: str) -> GLUEClassifier:
    """MiniLM for RTE with ``norm``, in training mode; the same initial weights at every call."""
    torch.manual_seed(0)
    return GLUEClassifier(
        task=conf("task/rte.yaml"),
        model=conf("model/minilm.yaml"),
        norm=conf(f"norm/{norm}.yaml"),
        optim={},
    ).train()


def paired_step_ratios(args, glue_dir: str) -> tuple[dict[str, float], float]:
    """Median per-step time of each norm over none, the norms' steps interleaved on the same batch
    (:func:`interleaved_step_seconds`), and the median step seconds of none."""
    seconds = interleaved_step_seconds(
        {norm: seeded_classifier(norm) for norm in NORMS},
        lambda model, batch: model.loss(model(batch), batch["labels"]),
        rte_train_batches(args, glue_dir),
        args.warmup,
        args.steps,
    )
    return median_ratios(seconds, "none"), statistics.median(seconds["none"])


def bf16_step_ratio(args, glue_dir: str) -> tuple[float, float]:
    """Median per-step time of ``trainer.precision=bf16-mixed`` over ``32-true`` (default run,
    norm=isobn), interleaved on the same batches, and the median float32 step seconds."""
    models = {precision: seeded_classifier("isobn") for precision in ("32-true", "bf16-mixed")}

    def loss(model, batch):  # as Lightning's bf16-mixed: forward and loss under autocast
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=model is models["bf16-mixed"]):
            return model.loss(model(batch), batch["labels"])

    seconds = interleaved_step_seconds(
        models, loss, rte_train_batches(args, glue_dir), args.warmup, args.steps
    )
    return median_ratios(seconds, "32-true")["bf16-mixed"], statistics.median(seconds["32-true"])


def isobn_layer_seconds(dim: int, batch_size: int, repeats: int = 200) -> float:
    """Seconds of one IsoBN training forward + backward, timed alone (immune to step noise)."""
    layer = IsoBN(dim).train()
    h = torch.randn(batch_size, dim, requires_grad=True)
    for _ in range(10):
        layer(h).sum().backward()
    start = time.perf_counter()
    for _ in range(repeats):
        layer(h).sum().backward()
    return (time.perf_counter() - start) / repeats


def compare_with_trainer(args, glue_dir: str) -> None:
    """Separate runs of ours (each norm) and of the HF Trainer, interleaved in rounds."""
    configs = {
        f"ours, norm={norm}": (lambda norm=norm: run_ours(norm, args, glue_dir)) for norm in NORMS
    }
    configs["HF Trainer, dynamic padding"] = lambda: run_hf_trainer(args, glue_dir, False)
    configs["HF Trainer, padded to max_length"] = lambda: run_hf_trainer(args, glue_dir, True)
    measured: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    for round_ in range(args.rounds):
        for name, run in configs.items():
            measured[name].append(run())
            print(
                f"round {round_ + 1} {name}: {measured[name][-1]['examples_per_s']:.1f} ex/s",
                flush=True,
            )
    speed = {
        name: statistics.median(r["examples_per_s"] for r in runs)
        for name, runs in measured.items()
    }
    none, trainer = speed["ours, norm=none"], speed["HF Trainer, dynamic padding"]
    print(
        f"\nMiniLM on RTE, batch {args.batch_size}, max length {args.max_length}, "
        f"{args.steps} timed steps x {args.rounds} rounds, "
        f"torch threads {torch.get_num_threads()}\n"
    )
    print("| configuration | examples/s | mean padded length | vs ours none | vs HF Trainer |")
    print("|---|---|---|---|---|")
    for name, runs in measured.items():
        length = statistics.median(r["padded_length"] for r in runs)
        print(
            f"| {name} | {speed[name]:.1f} | {length:.1f} | {speed[name] / none:.3f} | "
            f"{speed[name] / trainer:.3f} |"
        )
    print(f"\nours (none) / HF Trainer: {none / trainer:.2f}x (target >= 1)")
    isobn_cost = 100 * (1 - speed["ours, norm=isobn"] / none)
    print(f"IsoBN cost over none, separate runs: {isobn_cost:+.1f}% (drift-prone, see below)")


def report_norm_cost(args, glue_dir: str) -> None:
    """What each norm adds to a training step, measured so that machine drift cancels."""
    ratios, step = paired_step_ratios(args, glue_dir)
    for norm in NORMS[1:]:
        print(
            f"{norm} step time over none, interleaved on the same batches (median of "
            f"{args.steps} steps): {ratios[norm]:.3f} = {100 * (ratios[norm] - 1):+.1f}%"
            + (" (target <= +3%)" if norm == "isobn" else "")
        )
    layer = isobn_layer_seconds(384, args.batch_size)
    print(
        f"IsoBN layer alone: {1000 * layer:.2f} ms per step = {100 * layer / step:.2f}% of a "
        f"{step:.2f} s training step"
    )


def report_bf16_speedup(args, glue_dir: str) -> None:
    """What ``trainer=cpu_bf16`` (bf16 autocast) gains per training step on this CPU."""
    ratio, step = bf16_step_ratio(args, glue_dir)
    print(
        f"bf16-mixed step time over 32-true, norm=isobn, interleaved on the same batches (median "
        f"of {args.steps} steps): {ratio:.3f}, a {1 / ratio:.2f}x speed-up of a {step:.2f} s "
        "float32 step"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--norms-only", action="store_true", help="skip the HF Trainer comparison")
    parser.add_argument("--bf16-only", action="store_true", help="only bf16-mixed vs 32-true")
    args = parser.parse_args()
    glue_dir = quiet_offline_glue_dir()
    if not args.bf16_only:
        if not args.norms_only:
            compare_with_trainer(args, glue_dir)
        report_norm_cost(args, glue_dir)
    report_bf16_speedup(args, glue_dir)


if __name__ == "__main__":
    main()
