"""What ``gpu_check.py`` measures, on any device (the tests run it on CPU with tiny models).

Data and models need nothing downloaded: RTE is generated with RTE's length distribution when no
GLUE folder is given, and encoders are BERT models of a given size with random weights (throughput
needs no pretrained weights). Timings wait for the device at both ends of what they time, since
CUDA runs asynchronously.
"""

from __future__ import annotations

import argparse
import itertools
import random
import re
import statistics
import time
from pathlib import Path

import lightning as L
import numpy as np
import torch
from bench_throughput import LightningClock, StepClock, conf, timed_hf_trainer
from transformers import (
    BertConfig,
    BertModel,
    PreTrainedTokenizerBase,
)

from isotune.data import GLUEDataModule
from isotune.data.tasks import TaskSpec
from isotune.errors import IsotuneError
from isotune.isotropy.views import measure_view
from isotune.model.classifier import GLUEClassifier
from isotune.model.compiling import compile_encoder
from isotune.model.encoders import load_tokenizer, wordpiece_tokenizer

RTE, TRAIN = conf("task/rte.yaml"), conf("train.yaml")
# Token counts (MiniLM's WordPiece, special tokens excluded) of RTE's 2490 training pairs at these
# quantile levels. Generated text draws its lengths from them, so its batches pad as RTE's do.
LEVELS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
RTE_TOKENS = {
    "sentence1": (5, 20, 26, 31, 35, 39, 45, 56, 90, 122, 143, 182, 280),
    "sentence2": (3, 7, 8, 9, 9, 10, 11, 12, 14, 18, 23, 33, 51),
}
RTE_SIZES = {"train": 2490, "validation": 277}
MINILM_VOCAB = 30522  # all-MiniLM-L6-v2's vocabulary size (BERT-base uncased's)
WHOLE_WORD = re.compile(r"[a-z0-9]+")  # a vocabulary entry that is one token on its own
# Relative difference allowed between IsoBN's statistics after bf16 and float32 forward passes.
# bf16 rounds to 0.4%, compounded over the encoder's layers: on CPU, random and pretrained MiniLM
# give 0.0005-0.008 after 20 RTE batches. 0.03, about 4x that, is more than rounding explains.
ISOBN_TOLERANCE = 0.03


# -- data and models -----------------------------------------------------------------------------
def make_tokenizer() -> PreTrainedTokenizerBase:
    """MiniLM's tokenizer where its package is installed, else a WordPiece tokenizer of the same
    size whose words are w5, w6, ... (exact for generated text; real text then counts words)."""
    try:
        return load_tokenizer(conf("model/minilm.yaml")["name_or_path"])
    except IsotuneError:
        return wordpiece_tokenizer([f"w{i}" for i in range(5, MINILM_VOCAB)])


def write_generated_rte(glue_dir: Path, tokenizer: PreTrainedTokenizerBase, seed: int = 0) -> Path:
    """RTE's train and dev TSVs in RTE's sizes under ``glue_dir``: each text is random whole words
    of the vocabulary (one token each), as many as a draw from RTE's token counts."""
    words = sorted(word for word in tokenizer.get_vocab() if WHOLE_WORD.fullmatch(word))
    rng = random.Random(seed)
    folder = glue_dir / RTE["glue_dir"]
    folder.mkdir(parents=True, exist_ok=True)
    for split, size in RTE_SIZES.items():
        lines = ["index\tsentence1\tsentence2\tlabel"]
        for i in range(size):
            lengths = [
                round(float(np.interp(rng.random(), LEVELS, q))) for q in RTE_TOKENS.values()
            ]
            texts = [" ".join(rng.choices(words, k=length)) for length in lengths]
            lines.append("\t".join([str(i), *texts, RTE["labels"][i % 2]]))
        (folder / RTE["files"][split]).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return glue_dir


def rte_glue_dir(glue_dir: str | None, tokenizer: PreTrainedTokenizerBase, work: Path) -> Path:
    """The GLUE folder given, made absolute (the sweep's jobs run in their own folder, where
    GLUE_DIR=../shared/data/glue would name another place), or one with generated RTE written
    under ``work``."""
    return Path(glue_dir).resolve() if glue_dir else write_generated_rte(work / "glue", tokenizer)


def rte_data(
    tokenizer: PreTrainedTokenizerBase,
    glue_dir: Path,
    batch_size: int,
    pad_buckets: list[int] | None = None,
):
    """RTE's loaders as the default run makes them (length-grouped batches, max length), each
    batch padded to its longest example or, with ``pad_buckets``, to its bucket."""
    max_length = TRAIN["data"]["max_length"]
    task = TaskSpec.from_config(RTE)
    return GLUEDataModule(
        task, tokenizer, glue_dir, max_length, batch_size=batch_size, seed=0,
        pad_buckets=pad_buckets,
    )  # fmt: skip


def save_random_encoder(folder: Path, tokenizer: PreTrainedTokenizerBase, sizes: dict) -> Path:
    """A BERT encoder of ``sizes`` (BertConfig fields) with random weights, and the tokenizer,
    saved as a model folder that ``model.name_or_path`` can name."""
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tokenizer), **sizes)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def classifier(model_cfg: dict, norm: str, device: torch.device, **optim) -> GLUEClassifier:
    """The default run's classifier on ``device``; ``optim`` overrides its optim settings."""
    torch.manual_seed(0)  # the same head in every copy
    settings = {**TRAIN["optim"], **optim}
    return GLUEClassifier(RTE, model_cfg, conf(f"norm/{norm}.yaml"), settings).to(device)


# -- measurements --------------------------------------------------------------------------------
def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class DeviceStepClock(StepClock):
    """bench_throughput's step clock, waiting for the device at both ends of a step."""

    def __init__(self, warmup: int, device: torch.device):
        super().__init__(warmup)
        self.device = device

    def start(self) -> None:
        synchronize(self.device)
        super().start()

    def stop(self, examples: int, padded_length: int) -> None:
        synchronize(self.device)
        super().stop(examples, padded_length)

    def result(self) -> dict[str, float]:
        return {**super().result(), "examples": self.examples}


def lightning_trainer(device: torch.device, callbacks: list, **limits) -> L.Trainer:
    """A Lightning trainer with what `trainer=gpu` sets for a step (precision, clipping,
    accumulation; read from conf/trainer), on ``device``, without logs or checkpoints."""
    gpu = {**conf("trainer/default.yaml"), **conf("trainer/gpu.yaml")}
    return L.Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=[device.index or 0] if device.type == "cuda" else 1,
        **{key: gpu[key] for key in ("precision", "gradient_clip_val", "accumulate_grad_batches")},
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        **limits,
    )


def first_use_batches(datamodules: list) -> list[tuple[dict, bool]]:
    """Every training and validation batch of ``datamodules``, each with whether it trains."""
    batches = []
    for datamodule in datamodules:
        batches += [(batch, True) for batch in datamodule.train_dataloader()]
        batches += [(batch, False) for loader in datamodule.val_dataloader() for batch in loader]
    return batches


def timed_pass(model: GLUEClassifier, batches: list[tuple[dict, bool]], device) -> float:
    """Seconds for one pass over ``batches`` under bf16 autocast: a forward and backward pass for
    a training batch, a forward pass for a validation batch."""
    synchronize(device)
    start = time.perf_counter()
    for batch, train in batches:
        batch = {key: value.to(device) for key, value in batch.items()}
        model.train(train)
        with torch.set_grad_enabled(train), torch.autocast(device.type, torch.bfloat16):
            loss = model.loss(model(batch), batch["labels"])
        if train:
            loss.backward()
    synchronize(device)
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def first_use_cost(model_cfg: dict, datamodules: list, device: torch.device) -> dict:
    """Every training and validation batch of ``datamodules`` through one model twice, each pass
    timed (:func:`timed_pass`). A GPU's first pass pays what its stack does once for each new
    input shape (choosing and loading kernels, cuDNN attention's plans), and length-grouped
    batches bring many shapes; the second pass pays none of it. Returns both passes' seconds and
    the counts of batches and of shapes."""
    model = classifier(model_cfg, "none", device)
    batches = first_use_batches(datamodules)
    cold, warm = timed_pass(model, batches, device), timed_pass(model, batches, device)
    return {"cold_s": cold, "warm_s": warm, **shape_counts(batches)}


def shape_counts(batches: list[tuple[dict, bool]]) -> dict[str, int]:
    shapes = {tuple(batch["input_ids"].shape) for batch, _ in batches}
    return {"batches": len(batches), "shapes": len(shapes)}


# (padding, cuDNN attention) in the order their first passes run: cuDNN's off first (no plans
# to make), then its on, buckets before exact lengths (whose shapes include a few of theirs)
FIRST_USE_VARIANTS = (
    ("exact", False),
    ("buckets", False),
    ("buckets", True),
    ("exact", True),
)


def first_use_variants(
    model_cfg: dict, padded: dict[str, list], device: torch.device, warm_rounds: int
) -> dict[tuple[str, bool], dict]:
    """The first pass and a warm pass (:func:`timed_pass`) of one model over RTE's batches per
    (padding, cuDNN attention) of :data:`FIRST_USE_VARIANTS`, ``padded`` giving each padding's
    data modules. One pass over a batch shape met by none of them first pays the process's own
    first use (CUDA's context, cuBLAS), so that each first pass pays only what its variant meets
    anew; then the first passes in that order; then ``warm_rounds`` rounds of every variant,
    interleaved, whose median is the warm pass. cuDNN attention is switched with
    ``torch.backends.cuda.enable_cudnn_sdp`` and left as it was found."""
    model = classifier(model_cfg, "none", device)
    batches = {padding: first_use_batches(modules) for padding, modules in padded.items()}
    before = torch.backends.cuda.cudnn_sdp_enabled()
    first = batches["exact"][0][0]  # cut to 3 x 7: no batch of RTE's has that shape
    odd = {key: value[:3, :7] if value.ndim == 2 else value[:3] for key, value in first.items()}
    measured = {variant: {"warm": []} for variant in FIRST_USE_VARIANTS}
    try:
        for cudnn in (False, True):  # the process's first use, on a shape nothing else has
            torch.backends.cuda.enable_cudnn_sdp(cudnn)
            timed_pass(model, [(odd, True), (odd, False)], device)
        for variant in FIRST_USE_VARIANTS:
            torch.backends.cuda.enable_cudnn_sdp(variant[1])
            measured[variant]["cold_s"] = timed_pass(model, batches[variant[0]], device)
        for _, variant in itertools.product(range(warm_rounds), FIRST_USE_VARIANTS):
            torch.backends.cuda.enable_cudnn_sdp(variant[1])
            measured[variant]["warm"].append(timed_pass(model, batches[variant[0]], device))
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
    return {
        variant: {
            "cold_s": times["cold_s"],
            "warm_s": statistics.median(times["warm"]),
            **shape_counts(batches[variant[0]]),
        }
        for variant, times in measured.items()
    }


def ours_throughput(
    model_cfg: dict, datamodule, device, warmup: int, steps: int, fused="auto", compiled=False
) -> dict:
    """Our trainer's steps (``trainer=gpu``'s precision) with ``optim.fused=fused`` and, when
    ``compiled``, the encoder compiled as ``compile=true`` does (inductor's compiling
    falls in the untimed warm-up steps and in the first steps of each new shape)."""
    clock = DeviceStepClock(warmup, device)
    callbacks = [LightningClock(clock)]
    trainer = lightning_trainer(device, callbacks, max_steps=warmup + steps, limit_val_batches=0)
    model = classifier(model_cfg, "none", device, fused=fused)
    if compiled:
        compile_encoder(model.encoder, device)
    trainer.fit(model, datamodule=datamodule)
    return clock.result()


def hf_throughput(model_dir: str, datamodule, device, warmup: int, steps: int) -> dict:
    """The HF ``Trainer`` with bf16 and its defaults otherwise (random batches, each padded to its
    longest example), on our tokenization of the same data."""
    return timed_hf_trainer(
        DeviceStepClock(warmup, device),
        model_dir,
        datamodule.tokenizer,
        datamodule.dataset("train"),
        batch_size=datamodule.batch_size,
        max_steps=warmup + steps,
        learning_rate=TRAIN["optim"]["lr"],
        warmup_steps=round(TRAIN["optim"]["warmup_ratio"] * (warmup + steps)),
        bf16=True,
        use_cpu=device.type == "cpu",
    )


THROUGHPUT_VARIANTS = ("ours, foreach AdamW", "ours, fused AdamW", "ours, compiled", "HF")


def throughput(
    model_cfg: dict,
    datamodule,
    device,
    warmup: int,
    steps: int,
    rounds: int,
    bucketed=None,
    compiled: bool = False,
) -> dict:
    """Per variant of :data:`THROUGHPUT_VARIANTS`: ours with foreach and with fused AdamW, with
    ``compiled`` ours compiled too (fused, on ``bucketed``: few shapes, few compiles; run once, in
    the first round), and the HF ``Trainer`` (fused AdamW by default since torch 2.8); each run
    ``rounds`` times on the same data, interleaved, and the median of each figure (examples/s,
    mean padded length, examples timed)."""
    runs = {
        "ours, foreach AdamW": lambda: ours_throughput(
            model_cfg, datamodule, device, warmup, steps, fused=False
        ),
        "ours, fused AdamW": lambda: ours_throughput(model_cfg, datamodule, device, warmup, steps),
        "ours, compiled": lambda: ours_throughput(
            model_cfg, bucketed, device, warmup, steps, compiled=True
        ),
        "HF": lambda: hf_throughput(model_cfg["name_or_path"], datamodule, device, warmup, steps),
    }
    if not compiled:
        del runs["ours, compiled"]
    measured = {name: [] for name in runs}
    for round_, (name, run) in itertools.product(range(rounds), runs.items()):
        if name != "ours, compiled" or round_ == 0:  # once: its compiling is most of its time
            measured[name].append(run())
    return {
        name: {key: statistics.median(r[key] for r in results) for key in results[0]}
        for name, results in measured.items()
    }


def measures_agreement(device: torch.device, points: int = 1000, dims: int = 384) -> dict:
    """The isotropy callback's measures of one view (:func:`measure_view`) of a probe-sized cloud
    with a few loud dimensions, on ``device`` and on the CPU: the largest relative difference of
    their scalars (0-valued ones compared absolutely) and each one's seconds (median of 3, after
    one untimed run)."""
    generator = torch.Generator().manual_seed(0)
    cloud = torch.randn(points, dims, generator=generator)
    cloud[:, :3] *= torch.tensor([12.0, 6.0, 3.0])
    cloud += 0.7
    measured, seconds = {}, {}
    for where in (device, torch.device("cpu")):
        on = cloud.to(where)
        measure_view(on)
        times = []
        for _ in range(3):
            synchronize(where)
            start = time.perf_counter()
            measured[where.type] = measure_view(on).scalars
            synchronize(where)
            times.append(time.perf_counter() - start)
        seconds[where.type] = statistics.median(times)
    cpu = measured["cpu"]
    differences = [
        abs(value - cpu[name]) / (abs(cpu[name]) or 1.0)
        for name, value in measured[device.type].items()
    ]
    return {
        "max_relative": max(differences),
        "scalars": len(differences),
        "device_s": seconds[device.type],
        "cpu_s": seconds["cpu"],
        "points": points,
        "dims": dims,
    }


def relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| (Frobenius), in float64."""
    return float((a.double() - b.double()).norm() / b.double().norm())


def isobn_precision(model_cfg: dict, batches: list[dict], device) -> dict:
    """IsoBN's statistics after the same batches under bf16 autocast (what `trainer=gpu`'s
    bf16-mixed applies) and in float32, from the same weights with dropout off, so that only the
    precision differs: their dtypes under bf16 and their relative differences."""
    stats = {}
    for precision in ("bf16", "float32"):
        model = classifier(model_cfg, "isobn", device).eval()
        model.norm.train()  # folds each batch into the statistics
        with torch.no_grad(), torch.autocast(device.type, torch.bfloat16, precision == "bf16"):
            for batch in batches:
                model({key: value.to(device) for key, value in batch.items()})
        norm = model.norm
        stats[precision] = {"covariance": norm.run_cov, "std": norm.run_std, "scale": norm.scale()}
    bf16, float32 = stats["bf16"], stats["float32"]
    differences = {name: relative_difference(bf16[name], float32[name]) for name in bf16}
    dtypes = sorted({str(bf16[name].dtype).removeprefix("torch.") for name in bf16})
    passed = dtypes == ["float32"] and max(differences.values()) <= ISOBN_TOLERANCE
    return {"dtypes": dtypes, "differences": differences, "passed": passed}


def norm_step_ratio(model_cfg: dict, batches: list[dict], device, warmup: int) -> dict:
    """Median over steps of isobn's / none's training-step time under bf16 autocast, the two
    models stepping in turn on each batch so that drift of the machine cancels."""
    models = {norm: classifier(model_cfg, norm, device).train() for norm in ("none", "isobn")}
    lr = TRAIN["optim"]["lr"]
    optimizers = {norm: torch.optim.AdamW(m.parameters(), lr=lr) for norm, m in models.items()}
    seconds = {norm: [] for norm in models}
    for step, batch in enumerate(batches):
        batch = {key: value.to(device) for key, value in batch.items()}
        for norm in ("none", "isobn") if step % 2 == 0 else ("isobn", "none"):
            synchronize(device)
            start = time.perf_counter()
            with torch.autocast(device.type, torch.bfloat16):
                loss = models[norm].loss(models[norm](batch), batch["labels"])
            loss.backward()
            optimizers[norm].step()
            optimizers[norm].zero_grad()
            synchronize(device)
            if step >= warmup:
                seconds[norm].append(time.perf_counter() - start)
    pairs = zip(seconds["isobn"], seconds["none"], strict=True)
    return {
        "ratio": statistics.median(isobn / none for isobn, none in pairs),
        "none_ms": 1000 * statistics.median(seconds["none"]),
        "steps": len(seconds["none"]),
    }


def callback_share(model_cfg: dict, datamodule, device, rounds: int, output_dir: Path, **options):
    """One epoch (train + validation) without and with the isotropy callback at the default run's
    settings (conf/callbacks/isotropy.yaml; ``options`` override them), alternating ``rounds``
    times: the median epoch times, the share the callback adds, and its settings."""
    from bench_isotropy_cost import EpochClock  # both import matplotlib (the callback's figures)

    from isotune.callbacks.isotropy import IsotropyMonitor

    defaults = conf("callbacks/isotropy.yaml")["isotropy"]  # ${...} values: the run's config's
    settings = {k: v for k, v in defaults.items() if k != "_target_" and "${" not in str(v)}
    settings.update(options)
    epochs = {"without": [], "with": []}
    for _, variant in itertools.product(range(rounds), epochs):
        clock = EpochClock()
        monitor = IsotropyMonitor(**settings, output_dir=str(output_dir))
        callbacks = [clock, monitor] if variant == "with" else [clock]
        trainer = lightning_trainer(device, callbacks, max_epochs=1)
        trainer.fit(classifier(model_cfg, "none", device), datamodule=datamodule)
        epochs[variant].append(clock.seconds)
    without, with_ = (statistics.median(seconds) for seconds in epochs.values())
    return {"epoch_s": without, "with_s": with_, "share": with_ / without - 1, **settings}


if __name__ == "__main__":  # a part of gpu_check.py with no command of its own: --help says so
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args()
    parser.error("it runs nothing by itself; run python benchmarks/gpu_check.py (--help)")
