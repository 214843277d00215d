"""A small transformer trained with REKLS: does the chapter's failure reach a real model?

Issue 37, item 4. The model is built from ``torch.nn`` layers nobody here wrote -- an
``nn.Embedding`` (vocabulary × width: a tall 128×32 weight), ``nn.TransformerEncoderLayer``
blocks with a causal mask (pre-norm, no dropout; their attention projection is 96×32, the
feed-forward weights 64×32 and 32×64) and an ``nn.Linear`` output head (128×32) -- and
trained as a next-token model on sequences from a seeded Markov source (no download).

Every 2-D weight is stepped by REKLS (:class:`eigprec.SOAP` with KL-Shampoo and ``eigh``,
the chapter's defaults), the biases and LayerNorm weights by ``torch.optim.AdamW``; the
gradient is clipped to a global norm of 1 as trainers set it (``clip=None`` turns that off).
At ``spike_step`` one layer's gradient is multiplied by ``spike`` *before* the clip, as a
bad batch hitting one layer would be. The arms are float64 (model and optimizer), float32 at
``'highest'`` and float32 at ``'high'`` with TF32 emulated in the optimizer's products (the
model's own forward and backward stay float32: the question is the preconditioner). Harm is
the peak loss on a fixed held-out batch in the ``window`` steps after the spike, over the
float64 run's (same seed, spike and clip), as in the failure map.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from eigprec._args import check_int, check_real
from eigprec.precision import current_matmul_precision, matmul_precision
from eigprec.soap.monitor import SOAPMonitor
from eigprec.tf32 import emulate_tf32
from eigprec_book.chapters.degeneracy.failure_map import ARMS, reference_first
from eigprec_book.chapters.degeneracy.training import REMEDIES, remedy_class

__all__ = ["JUMP", "REAL_SPIKE", "TRAINED", "LMResult", "TinyLM", "lm_experiment"]

#: A run *jumped* when its peak held-out loss after the spike exceeds its loss just before
#: the spike by more than this factor (10 %).
JUMP = 1.1

#: ``"harmed"``: the peak more than this multiple of the float64 run's peak.
HARM_RATIO = 2.0

#: The float64 run of a seed is a reference only if, just before the spike, its held-out
#: loss is below this fraction of chance (ln of the vocabulary: a uniform guess); else that
#: seed's runs are marked ``"reference failed"`` and left out of every count.
TRAINED = 0.8

#: A *real* spike: a step before the injected one whose gradient norm (all weights, before
#: the clip) exceeds this multiple of the mean of the norms before it.
REAL_SPIKE = 10.0


@dataclass(frozen=True)
class TinyLM:
    """The model's sizes and the data source.

    Attributes:
        vocab: Tokens; the embedding and the head are vocab × width.
        width: Model width.
        blocks: Transformer blocks.
        heads: Attention heads.
        ffn: Feed-forward width.
        context: Tokens per sequence.
        batch: Sequences per step.
        seed: Seeds the source, the weights and the batches (explicit generators).

    Example:
        >>> lm = TinyLM(vocab=16, width=8, ffn=16, context=6, batch=2)
        >>> lm.tokens(0).shape
        torch.Size([2, 7])
    """

    vocab: int = 128
    width: int = 32
    blocks: int = 2
    heads: int = 2
    ffn: int = 64
    context: int = 32
    batch: int = 16
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("vocab", "width", "blocks", "heads", "ffn", "context", "batch"):
            check_int(name, getattr(self, name), low=1)
        check_int("seed", self.seed, low=0)
        if self.width % self.heads:
            raise ValueError(f"width {self.width} must be a multiple of heads {self.heads}")

    def _gen(self, stream: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + stream)

    def transitions(self) -> torch.Tensor:
        """The source: each token is followed by one of 4 likely tokens (or any, rarely)."""
        return _transitions(self.vocab, self._gen(0).initial_seed()).clone()

    def tokens(self, stream: int, batch: int | None = None) -> torch.Tensor:
        """``batch`` sequences of ``context + 1`` tokens drawn from the source."""
        gen = self._gen(1 + stream)
        n = self.batch if batch is None else batch
        probs = _transitions(self.vocab, self._gen(0).initial_seed())
        out = torch.empty(n, self.context + 1, dtype=torch.long)
        out[:, 0] = torch.randint(0, self.vocab, (n,), generator=gen)
        for t in range(self.context):
            out[:, t + 1] = torch.multinomial(probs[out[:, t]], 1, generator=gen)[:, 0]
        return out

    def model(self, dtype: torch.dtype) -> nn.Module:
        """The network, its weights drawn from this seed's generator."""
        net = _LM(self).to(dtype)
        gen = self._gen(2)
        with torch.no_grad():
            for name, p in net.named_parameters():
                if p.dim() == 2:
                    std = 1.0 if name.startswith("embed") else p.shape[1] ** -0.5
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * std)
                elif "norm" in name and name.endswith("weight"):
                    p.fill_(1.0)
                else:
                    p.zero_()
        return net


@functools.lru_cache(maxsize=8)
def _transitions(v: int, seed: int) -> torch.Tensor:
    # Drawn once per (vocabulary, seed): every batch of a run reads the same table.
    gen = torch.Generator().manual_seed(seed)
    probs = torch.full((v, v), 0.02 / v, dtype=torch.float64)
    likely = torch.randint(0, v, (v, 4), generator=gen)
    weights = torch.rand(v, 4, generator=gen, dtype=torch.float64) + 0.5
    probs.scatter_add_(1, likely, 0.98 * weights / weights.sum(1, keepdim=True))
    return probs / probs.sum(1, keepdim=True)


class _LM(nn.Module):
    def __init__(self, cfg: TinyLM) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.width)
        layer = nn.TransformerEncoderLayer(
            cfg.width, cfg.heads, cfg.ffn, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, cfg.blocks, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(cfg.width)
        self.head = nn.Linear(cfg.width, cfg.vocab, bias=False)
        pos = torch.arange(cfg.context, dtype=torch.float64)[:, None]
        freq = torch.exp(-math.log(1e4) * torch.arange(0, cfg.width, 2) / cfg.width)
        table = torch.zeros(cfg.context, cfg.width, dtype=torch.float64)
        table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
        self.register_buffer("pos", table)
        mask = torch.triu(torch.full((cfg.context, cfg.context), -math.inf), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        n = tokens.shape[1]
        x = self.blocks(x, mask=self.mask[:n, :n].to(x.dtype), is_causal=True)
        return self.head(self.norm(x))


def _loss(net: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = net(tokens[:, :-1])
    return nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1)
    )


@dataclass
class LMResult:
    """What :func:`lm_experiment` measured: one row per (arm, seed).

    Attributes:
        rows: Dicts with ``"arm"``, ``"seed"``, ``"peak"`` (largest held-out loss in the
            window after the spike), ``"before"`` (held-out loss just before the spike),
            ``"final"``, ``"ratio"`` (peak over the float64 run's), ``"harmed"`` (ratio >
            :data:`HARM_RATIO`), ``"jump"`` (peak
            over ``before``: the spike's own effect, which does not depend on how well the
            run had trained before it), ``"jump ratio"`` (jump over the float64 run's),
            ``"clipped
            spike"`` (the spiked layer's gradient norm after the clip over its norm the step
            before), ``"flag before"`` and ``"flagged"`` (steps the monitor flagged on the
            spiked layer before the spike, and whether it flagged it from the spike on),
            ``"reference failed"`` (the seed's float64 run had not trained before the spike:
            :data:`TRAINED`), ``"largest norm ratio"`` (the largest gradient norm before the
            spike over the mean of the norms before it) and ``"real spike"`` (that ratio
            above :data:`REAL_SPIKE`).
        curves: ``{(arm, seed): held-out loss per step}``.
        config: The arguments.
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    curves: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> list[dict[str, Any]]:
        """Per arm, over the seeds whose float64 reference trained: seeds, harmed, jumped and
        flagged seeds, and median and range of ratio and jump (NaN where no seed is left)."""
        out = []
        for arm in self.config["arms"]:
            every = [r for r in self.rows if r["arm"] == arm]
            rs = [r for r in every if not r["reference failed"]]
            ratios = [r["ratio"] for r in rs] or [math.nan]
            jumps = [r["jump"] for r in rs] or [math.nan]
            out.append(
                {
                    "arm": arm,
                    "seeds": len(rs),
                    "reference failed": len(every) - len(rs),
                    "harmed": sum(r["harmed"] for r in rs),
                    "flagged": sum(r["flagged"] for r in rs),
                    "flag before": sum(r["flag before"] > 0 for r in rs),
                    "ratio median": statistics.median(ratios),
                    "ratio min": min(ratios),
                    "ratio max": max(ratios),
                    "jump median": statistics.median(jumps),
                    "jump min": min(jumps),
                    "jump max": max(jumps),
                    "jumped": sum(r["jump"] > JUMP for r in rs),
                }
            )
        return out


def lm_experiment(
    *,
    arms: Sequence[str] = ("float64", "highest", "high rna"),
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    spiked: str = "embed.weight",
    spike: float = 1000.0,
    clip: float | None = 1.0,
    spike_step: int = 50,
    window: int = 30,
    remedy: str = "none",
    lr: float = 3e-3,
    warmup: int = 0,
    eps: float = 1e-8,
    model: TinyLM | None = None,
    progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
) -> LMResult:
    """Train the small transformer for every arm and seed with a spike on one layer.

    Args:
        arms: Keys of :data:`~eigprec_book.chapters.degeneracy.failure_map.ARMS`, ``"float64"``
            among them (the reference).
        seeds: Seeds (source, weights and batches).
        spiked: Name of the 2-D parameter whose gradient spikes (``model.named_parameters``).
        spike: Factor of the spike, > 0.
        clip: Global gradient-norm clip (``torch.nn.utils.clip_grad_norm_``), or None.
        spike_step: 0-based step of the spike, ≥ 1.
        window: Steps after the spike over which the peak is taken, ≥ 1.
        remedy: A key of :data:`~eigprec_book.chapters.degeneracy.training.REMEDIES`, applied
            to every arm but float64, which stays the plain reference.
        lr: Learning rate of both optimizers.
        warmup: Steps of linear learning-rate warm-up (the rate at step t is
            ``lr · min(1, (t + 1) / warmup)``); 0: none.
        eps: REKLS's ε (and AdamW's).
        model: Sizes (its ``seed`` is replaced by each seed).
        progress: Optional wrapper of the loop over (arm, seed) pairs.

    Returns:
        An :class:`LMResult`.

    Raises:
        TypeError: on a count that is not an int or a number that is not real.
        ValueError: on an unknown arm, remedy or parameter name, no float64 arm, empty seeds, or a
            value out of range (before any training).

    Example:
        >>> r = lm_experiment(
        ...     arms=("float64", "highest"), seeds=(0,), spike_step=2, window=1,
        ...     model=TinyLM(vocab=16, width=8, ffn=16, context=6, batch=2),
        ... )
        >>> [row["arm"] for row in r.rows]
        ['float64', 'highest']
    """
    arms = reference_first(arms)
    if not seeds:
        raise ValueError("need at least one seed")
    if remedy not in REMEDIES:
        raise ValueError(f"remedy must be one of {sorted(REMEDIES)}, got {remedy!r}")
    seeds = [check_int("seed", s, low=0) for s in seeds]
    spike = check_real("spike", spike, low=0.0, low_open=True)
    if clip is not None:
        clip = check_real("clip", clip, low=0.0, low_open=True)
    spike_step = check_int("spike_step", spike_step, low=1)
    window = check_int("window", window, low=1)
    lr = check_real("lr", lr, low=0.0, low_open=True)
    warmup = check_int("warmup", warmup, low=0)
    eps = check_real("eps", eps, low=0.0, low_open=True)
    base = TinyLM() if model is None else model
    names = {n: p.dim() for n, p in _LM(base).named_parameters()}
    if names.get(spiked) != 2:
        two_d = sorted(n for n, d in names.items() if d == 2)
        raise ValueError(f"spiked must name a 2-D parameter, one of {two_d}; got {spiked!r}")

    result = LMResult(
        config={
            "arms": tuple(arms),
            "seeds": tuple(seeds),
            "spiked": spiked,
            "spike": spike,
            "clip": clip,
            "spike_step": spike_step,
            "window": window,
            "remedy": remedy,
            "lr": lr,
            "warmup": warmup,
            "eps": eps,
            "model": base,
        }
    )
    pairs: Iterable[Any] = [(seed, arm) for seed in seeds for arm in arms]
    if progress is not None:
        pairs = progress(pairs)
    f64: dict[int, dict[str, Any]] = {}
    for seed, arm in pairs:
        cfg = dataclasses.replace(base, seed=seed)
        with matmul_precision(current_matmul_precision()):
            cure = "none" if arm == "float64" else remedy
            row, curve = _train(
                cfg, arm, spiked, spike, clip, spike_step, window, cure, lr, warmup, eps
            )
        row["jump"] = row["peak"] / row["before"]
        if arm == "float64":
            f64[seed] = row
        row["reference failed"] = not f64[seed]["before"] < TRAINED * math.log(base.vocab)
        row["ratio"] = row["peak"] / f64[seed]["peak"]
        row["jump ratio"] = row["jump"] / f64[seed]["jump"]
        row["harmed"] = row["ratio"] > HARM_RATIO
        result.rows.append(row)
        result.curves[(arm, seed)] = curve
    return result


def _train(
    cfg: TinyLM,
    arm: str,
    spiked: str,
    spike: float,
    clip: float | None,
    spike_step: int,
    window: int,
    remedy: str,
    lr: float,
    warmup: int,
    eps: float,
) -> tuple[dict[str, Any], list[float]]:
    prec, dtype, rounding = ARMS[arm]
    net = cfg.model(dtype)
    params = dict(net.named_parameters())
    mats = [p for p in params.values() if p.dim() == 2]
    soap = remedy_class(remedy)(
        mats,
        lr=lr,
        eps=eps,
        weight_decay=0.0,
        use_kl_shampoo=True,
        use_eigh=True,
        fp32_matmul_prec=prec,  # type: ignore[arg-type]
        qr_fp32_matmul_prec=prec,  # type: ignore[arg-type]
        dtype=dtype,
        **REMEDIES[remedy],
    )
    adam = torch.optim.AdamW(
        [p for p in params.values() if p.dim() != 2], lr=lr, betas=(0.9, 0.95), eps=eps
    )
    monitor = SOAPMonitor(soap, spectra="full_rank")
    target = params[spiked]
    index = next(i for i, p in enumerate(mats) if p is target)
    tf32 = (lambda: emulate_tf32(rounding=rounding)) if rounding else contextlib.nullcontext
    held_out = cfg.tokens(-1, batch=64)
    curve, before_norm, passed = [], math.nan, math.nan
    flag_before, flagged = 0, False
    norms: list[float] = []
    largest = 0.0
    for step in range(spike_step + window + 1):
        if warmup:
            for opt in (soap, adam):
                for group in opt.param_groups:
                    group["lr"] = lr * min(1.0, (step + 1) / warmup)
        soap.zero_grad(set_to_none=True)
        adam.zero_grad(set_to_none=True)
        _loss(net, cfg.tokens(step)).backward()
        raw = target.grad.norm().item()
        if step < spike_step:
            grads = [p.grad for p in params.values() if p.grad is not None]
            total = math.sqrt(sum(g.double().square().sum().item() for g in grads))
            if norms:
                largest = max(largest, total / statistics.fmean(norms))
            norms.append(total)
        if step == spike_step:
            target.grad.mul_(spike)
        if clip is not None:
            nn.utils.clip_grad_norm_(net.parameters(), clip)
        if step == spike_step:
            passed = target.grad.norm().item() / before_norm
        before_norm = raw
        with tf32():
            soap.step()
        adam.step()
        signals = monitor.check()[index]
        if step < spike_step:
            flag_before += signals.flagged
        else:
            flagged = flagged or signals.flagged
        with torch.no_grad():
            curve.append(_loss(net, held_out).item())
    after = curve[spike_step + 1 :]
    row = {
        "arm": arm,
        "seed": cfg.seed,
        "peak": max(after),
        "before": curve[spike_step - 1],
        "final": curve[-1],
        "clipped spike": passed,
        "flag before": flag_before,
        "flagged": flagged,
        "largest norm ratio": largest,
        "real spike": largest > REAL_SPIKE,
    }
    return row, curve
