"""The isotropy callback's probe capture: forward hooks that keep the probe examples' vectors (the
sentence views; token states of some layers; for the layer profiles, every layer's sample) from
whatever batches the model encodes, validation's own or the probe's pass of its own."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from isotune.isotropy.layers import MASSIVE_K
from isotune.model.sentence_views import layer_sentence_vectors
from isotune.tracking.metric_keys import POST_NORM, PRE_NORM, SENTENCE_VIEWS


@dataclass(frozen=True)
class ProfileSampling:
    """What a capture keeps for the layer profiles: the model's ``layers`` hidden states (the
    embeddings first), ``per_example`` non-special tokens of each probe example (drawn with
    ``seed`` and the example's probe position, so the same ones every epoch), and each batch's
    ``massive_k`` tokens of largest magnitude."""

    layers: int
    per_example: int
    seed: int
    massive_k: int = MASSIVE_K


class ProbeCapture:
    """The probe's vectors, kept by forward hooks from whatever batches the module encodes. While
    attached, ``select`` names the probe examples of the next forward pass by their dev ``idx``; the
    hooks keep their rows of the norm's input and output and of ``token_layers`` (special tokens and
    padding excluded); ``vectors`` returns them in probe order. ``seconds`` adds up the time spent
    in the hooks."""

    def __init__(
        self,
        probe_idx: Sequence[int],
        special_ids: Sequence[int],
        token_layers: Sequence[int],
        profile: ProfileSampling | None = None,
    ) -> None:
        self.probe_idx = torch.tensor(probe_idx)
        self.position_of = torch.full((max(probe_idx) + 1,), -1)
        self.position_of[torch.tensor(probe_idx)] = torch.arange(len(probe_idx))
        self.special_ids = torch.tensor(special_ids)
        self.token_layers = tuple(token_layers)
        self.profile = profile
        self.names = [*SENTENCE_VIEWS, *(f"layer{layer}_tokens" for layer in self.token_layers)]
        if profile is not None:
            self.names += [
                f"{kind}_layer{layer}"
                for layer in range(profile.layers)
                for kind in ("sentence", "tokens", "massive", "massive_at")
            ]
        self.captured = torch.zeros(len(probe_idx), dtype=torch.bool)
        self.seconds = 0.0
        # view -> per batch: (probe positions, vectors, token count per example or None)
        self._parts: dict[str, list[tuple[Tensor, Tensor, Tensor | None]]] = {}
        self._rows: Tensor | None = None  # rows of the next forward pass that are probe examples
        self._positions: Tensor | None = None
        self._handles: list = []
        self._module: nn.Module | None = None  # whose pooling makes a layer's sentence vectors

    def attach(self, module: nn.Module) -> None:
        """Hooks on ``module.norm`` and, for token layers or layer profiles, on
        ``module.encoder``."""
        self._module = module
        self._handles = [module.norm.register_forward_hook(self._keep_sentence_views)]
        if self.token_layers or self.profile is not None:
            encoder = module.encoder
            self._handles += [
                encoder.register_forward_pre_hook(self._request_hidden_states, with_kwargs=True),
                encoder.register_forward_hook(self._keep_tokens, with_kwargs=True),
            ]

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.select(None)

    def select(self, idx: Tensor | None) -> None:
        """The dev ``idx`` of the next forward pass's examples; None: keep nothing from it."""
        self._rows = self._positions = None
        if idx is not None:
            idx = idx.cpu()
            positions = torch.full_like(idx, -1)
            known = idx < len(self.position_of)
            positions[known] = self.position_of[idx[known]]
            rows = (positions >= 0).nonzero().squeeze(1)
            if len(rows):
                self._rows, self._positions = rows, positions[rows]

    def missing(self) -> list[int]:
        """Probe positions not captured yet."""
        return (~self.captured).nonzero().squeeze(1).tolist()

    def vectors(self) -> dict[str, Tensor]:
        """Every view's vectors as float32 where they were kept (sentence views on the device
        that encoded them, token views on the CPU), in probe order (tokens: example by example,
        each example's tokens in their order)."""
        ordered = {}
        for name in self.names:
            parts = self._parts[name]
            positions, vectors, counts = zip(*parts, strict=True)
            order = torch.cat(positions).argsort()
            vectors = torch.cat(vectors).float()
            if counts[0] is None:
                ordered[name] = vectors[order.to(vectors.device)]
            else:
                pieces = vectors.split(torch.cat(counts).tolist())
                ordered[name] = torch.cat([pieces[i] for i in order.tolist()])
        return ordered

    def _keep(self, name: str, vectors: Tensor, counts: Tensor | None = None) -> None:
        if counts is not None:  # all the probe's tokens are many: off the accelerator at once
            vectors = vectors.cpu()
        self._parts.setdefault(name, []).append((self._positions, vectors.detach(), counts))

    def _keep_sentence_views(self, norm: nn.Module, inputs: tuple, output: Tensor) -> None:
        if self._rows is not None:
            start = time.perf_counter()
            rows = self._rows.to(output.device)
            self._keep(PRE_NORM, inputs[0][rows])
            self._keep(POST_NORM, output[rows])
            self.captured[self._positions] = True
            self.seconds += time.perf_counter() - start

    def _request_hidden_states(self, encoder: nn.Module, args: tuple, kwargs: dict):
        if self._rows is not None:
            return args, {**kwargs, "output_hidden_states": True}
        return None

    def _keep_tokens(self, encoder: nn.Module, args: tuple, kwargs: dict, output) -> None:
        if self._rows is not None:
            start = time.perf_counter()
            rows = self._rows.to(kwargs["input_ids"].device)
            ids, mask = kwargs["input_ids"][rows], kwargs["attention_mask"][rows]
            real = mask.bool() & ~torch.isin(ids, self.special_ids.to(ids.device))
            counts = real.sum(dim=1).cpu()
            for layer in self.token_layers:
                self._keep(f"layer{layer}_tokens", output.hidden_states[layer][rows][real], counts)
            if self.profile is not None:
                self._keep_profile(output.hidden_states, rows, mask, real)
            self.seconds += time.perf_counter() - start

    def _keep_profile(self, hidden_states, rows: Tensor, mask: Tensor, real: Tensor) -> None:
        """Each layer's pooled sentence vectors, a seeded sample of its non-special tokens (the
        same positions every epoch) and the tokens that hold the batch's largest magnitudes."""
        profile, positions = self.profile, self._positions
        chosen = torch.zeros_like(real)
        for row, (position, wanted) in enumerate(zip(positions.tolist(), real, strict=True)):
            candidates = wanted.nonzero().squeeze(1).cpu()
            generator = torch.Generator().manual_seed(profile.seed + position)
            keep = torch.randperm(len(candidates), generator=generator)[: profile.per_example]
            chosen[row, candidates[keep].to(chosen.device)] = True
        counts = chosen.sum(dim=1).cpu()
        padded = ~mask.bool()
        first = mask.argmax(dim=1)  # padding before it (left-padded families) is no position
        for layer in range(profile.layers):
            hidden = hidden_states[layer][rows]
            self._keep(f"sentence_layer{layer}", layer_sentence_vectors(self._module, hidden, mask))
            self._keep(f"tokens_layer{layer}", hidden[chosen], counts)
            # the k largest magnitudes of the batch lie in at most k tokens: its k loudest
            loudness = hidden.abs().amax(dim=2).masked_fill(padded, -1.0).flatten()
            loudest = loudness.topk(min(profile.massive_k, int(mask.sum()))).indices.cpu()
            example, token = loudest // hidden.shape[1], loudest % hidden.shape[1]
            order = example.argsort(stable=True)  # example by example, as _keep orders parts
            example, token = example[order].to(hidden.device), token[order].to(hidden.device)
            found = torch.bincount(example.cpu(), minlength=len(rows))
            self._keep(f"massive_layer{layer}", hidden[example, token], found)
            at = torch.stack([positions[example.cpu()], (token - first[example]).cpu()], dim=1)
            self._keep(f"massive_at_layer{layer}", at.float(), found)
