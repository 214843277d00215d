"""TF32 on four architectures from ``transformers``, built from their configurations.

GPT-2 (``GPT2LMHeadModel``), BERT (``BertForMaskedLM``), ViT
(``ViTForImageClassification``) and a ResNet-18-shaped ResNet
(``ResNetForImageClassification``, basic blocks, depths 2-2-2-2) are built from small
configuration objects with random weights -- nothing is downloaded -- and run one training
step (forward, loss, backward, AdamW step) and one evaluation (``eval``, ``no_grad``). The
attention of the three transformers is the ``"eager"`` implementation: its two products per
head are plain ``matmul`` calls that TF32 touches on a GPU and the audit sees (the default
``"sdpa"`` runs them in a fused kernel, which a TF32 GPU runs close to float32 accuracy and
the audit lists as not covered). Dropout is off, so two runs of a step compute the same
thing and their difference is TF32's alone.

:func:`tf32_effects` is what a GPU recorder calls: per model, the relative change of the
evaluation logits, the training loss and the gradients when the products run at ``'high'``
-- real TF32 on a TF32 GPU, emulated elsewhere or on request -- against float32.
"""

from __future__ import annotations

import contextlib
import copy
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from eigprec.audit import Attribution, AuditReport, tf32_attribution, tf32_audit
from eigprec.precision import matmul_precision
from eigprec.tf32 import emulate_tf32, has_real_tf32

__all__ = [
    "ARCHITECTURES",
    "ArchitectureAudit",
    "architecture_attribution",
    "audit_architecture",
    "build_architecture",
    "product_family",
    "tf32_effects",
]

#: The four architectures, by the short names the functions take.
ARCHITECTURES = ("gpt2", "bert", "vit", "resnet")

#: What each short name builds (the ``transformers`` class), for tables.
LABELS = {
    "gpt2": "GPT-2 (GPT2LMHeadModel)",
    "bert": "BERT (BertForMaskedLM)",
    "vit": "ViT (ViTForImageClassification)",
    "resnet": "ResNet (ResNetForImageClassification, laid out as ResNet-18)",
}

# Small widths so that all four, audited, run in seconds on one CPU core; the depths and
# the layer types are the library's own.
_VOCAB, _TOKENS, _SEQUENCES = 512, 32, 4
_IMAGE, _IMAGES, _CLASSES = 32, 8, 10


_CLASSES_OF = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
    "bert": ("BertConfig", "BertForMaskedLM"),
    "vit": ("ViTConfig", "ViTForImageClassification"),
    "resnet": ("ResNetConfig", "ResNetForImageClassification"),
}


def _transformers() -> Any:
    with warnings.catch_warnings():
        # transformers imports tqdm.auto (through huggingface_hub) and loads its classes
        # lazily; tqdm.auto warns in a Jupyter kernel without ipywidgets: noise under a cell.
        warnings.filterwarnings("ignore", message="IProgress not found")
        try:
            import transformers
        except ImportError as exc:  # the book's package needs it; the library never does
            raise ImportError(
                "eigprec_book.chapters.tf32.architectures needs transformers, a dependency of "
                "the book's package eigprec-book (make env installs it; or pip install "
                "transformers)"
            ) from exc
        for names in _CLASSES_OF.values():
            for class_name in names:
                getattr(transformers, class_name)
    transformers.logging.set_verbosity_error()
    return transformers


def _config(name: str) -> Any:
    tr = _transformers()
    if name == "gpt2":
        return tr.GPT2Config(
            vocab_size=_VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager",
        )  # fmt: skip
    if name == "bert":
        return tr.BertConfig(
            vocab_size=_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=256, max_position_embeddings=64, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, attn_implementation="eager",
        )  # fmt: skip
    if name == "vit":
        return tr.ViTConfig(
            image_size=_IMAGE, patch_size=8, num_channels=3, hidden_size=64,
            num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
            num_labels=_CLASSES, attn_implementation="eager",
        )  # fmt: skip
    if name == "resnet":
        return tr.ResNetConfig(
            num_channels=3, embedding_size=16, hidden_sizes=[16, 32, 64, 128],
            depths=[2, 2, 2, 2], layer_type="basic", num_labels=_CLASSES,
        )  # fmt: skip
    raise ValueError(f"name must be one of {ARCHITECTURES}, got {name!r}")


def build_architecture(name: str, seed: int = 0) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """One of :data:`ARCHITECTURES` with random weights, and a batch of random data.

    ``transformers`` initialises weights from torch's global generator, so the model is
    built inside :func:`torch.random.fork_rng` seeded with ``seed``: the caller's global
    random state is the same after the call as before. The batch comes from its own
    ``torch.Generator`` (seed ``seed + 1``): token ids (labels = the ids) for GPT-2 and
    BERT, standard normal 32×32 images and class labels for ViT and the ResNet.

    Args:
        name: ``"gpt2"``, ``"bert"``, ``"vit"`` or ``"resnet"``.
        seed: seed of the weights and of the data.

    Returns:
        The model (float32, training mode) and its keyword arguments, ``labels`` included.

    Raises:
        ValueError: for an unknown ``name``.
        ImportError: where ``transformers`` is not installed.

    Example:
        >>> state = torch.random.get_rng_state()
        >>> model, batch = build_architecture("gpt2")
        >>> torch.equal(state, torch.random.get_rng_state()), sorted(batch)
        (True, ['input_ids', 'labels'])
    """
    if name not in ARCHITECTURES:
        raise ValueError(f"name must be one of {ARCHITECTURES}, got {name!r}")
    config = _config(name)
    model_class = getattr(_transformers(), _CLASSES_OF[name][1])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    gen = torch.Generator().manual_seed(seed + 1)
    if name in ("gpt2", "bert"):
        ids = torch.randint(0, _VOCAB, (_SEQUENCES, _TOKENS), generator=gen)
        return model.train(), {"input_ids": ids, "labels": ids}
    images = torch.randn(_IMAGES, 3, _IMAGE, _IMAGE, generator=gen)
    labels = torch.randint(0, _CLASSES, (_IMAGES,), generator=gen)
    return model.train(), {"pixel_values": images, "labels": labels}


def _inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in batch.items() if k != "labels"}


def _to(batch: dict[str, torch.Tensor], device: Any, dtype: torch.dtype) -> dict[str, Any]:
    return {
        k: v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device)
        for k, v in batch.items()
    }


def product_family(module: str, op: str) -> str:
    """The kind of product a module path and operator name, for grouping a report's rows.

    Args:
        module: an :class:`~eigprec.audit.AuditRecord`'s ``module`` path.
        op: its ATen operator.

    Returns:
        ``"convolution"``, ``"head"`` (the output layer), ``"attention QKᵀ, PV"`` (the two
        products inside attention), ``"attention projections"``, ``"MLP"`` or ``"other"``.

    Example:
        >>> product_family("transformer.h.0.attn", "bmm")
        'attention QKᵀ, PV'
        >>> product_family("bert.encoder.layer.1.attention.output.dense", "addmm")
        'attention projections'
    """
    parts = module.split(".")
    last = parts[-1] if parts else ""
    if op.startswith("convolution"):
        return "convolution"
    if parts[0] in ("lm_head", "classifier", "cls"):
        return "head"
    if last in ("attn", "self", "attention") and "output" not in parts:
        return "attention QKᵀ, PV"
    if "attn" in parts or "attention" in parts:
        return "attention projections"
    if {"mlp", "intermediate", "output"} & set(parts):
        return "MLP"
    return "other"


def _training_step(model: torch.nn.Module, batch: dict, optimizer: Any) -> torch.Tensor:
    model.train()
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    return loss.detach()


def _evaluation(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(**_inputs(batch)).logits


@dataclass(frozen=True)
class ArchitectureAudit:
    """What :func:`audit_architecture` found for one model.

    Attributes:
        name: the short name (``"gpt2"``...).
        parameters: number of parameters.
        training: the audit of one training step (forward, backward, AdamW step).
        evaluation: the audit of one evaluation (``eval``, ``no_grad``).
        seconds: wall-clock time of the two audited runs.
    """

    name: str
    parameters: int
    training: AuditReport
    evaluation: AuditReport
    seconds: float

    def worst(self) -> Any:
        """The record with the largest norm-wise error, of both reports."""
        records = self.training.records[:1] + self.evaluation.records[:1]
        return max(records, key=lambda r: r.norm_error)


def audit_architecture(name: str, seed: int = 0, rounding: str | None = None) -> ArchitectureAudit:
    """Audit one training step and one evaluation of a model (:func:`build_architecture`).

    Args:
        name: one of :data:`ARCHITECTURES`.
        seed: seed of the weights and the data.
        rounding: TF32 rounding of the audit (None: the emulator's default).

    Returns:
        An :class:`ArchitectureAudit`; the sites are lines of ``transformers``' modelling
        code, told apart by their module paths.

    Example:
        >>> found = audit_architecture("vit")
        >>> found.worst().norm_error < 2**-10
        True
    """
    model, batch = build_architecture(name, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    start = time.perf_counter()
    # [show:audit]
    with tf32_audit(rounding=rounding) as training:
        _training_step(model, batch, optimizer)
    with tf32_audit(rounding=rounding) as evaluation:
        _evaluation(model, batch)
    # [/show:audit]
    seconds = time.perf_counter() - start
    count = sum(p.numel() for p in model.parameters())
    return ArchitectureAudit(name, count, training, evaluation, seconds)


@contextlib.contextmanager
def _conv_precision(value: str) -> Iterator[None]:
    """cuDNN's convolution switch set to ``value`` ('ieee' or 'tf32'), then restored."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is None or not hasattr(conv, "fp32_precision"):
        old = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = value == "tf32"
        try:
            yield
        finally:
            torch.backends.cudnn.allow_tf32 = old
        return
    old = conv.fp32_precision
    conv.fp32_precision = value
    try:
        yield
    finally:
        conv.fp32_precision = old


def _precision(
    mode: str, device: torch.device, emulated: bool, rounding: str | None, gpu: str | None = None
) -> Any:
    """The settings of one run: 'float32', 'high' or 'float64'."""
    stack = contextlib.ExitStack()
    if mode == "high":
        stack.enter_context(matmul_precision("high"))
        if emulated:
            force = device.type == "cuda"
            stack.enter_context(emulate_tf32(rounding=rounding, force=force, gpu=gpu))
        elif device.type == "cuda":
            stack.enter_context(_conv_precision("tf32"))
    else:
        stack.enter_context(matmul_precision("highest"))
        if device.type == "cuda":
            stack.enter_context(_conv_precision("ieee"))
    return stack


def _run(
    model: torch.nn.Module, batch: dict, settings: Any, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """Evaluation logits, then one forward/backward: the loss and every gradient."""
    model = copy.deepcopy(model).to(dtype)
    with settings:
        logits = _evaluation(model, batch)
        model.train()
        loss = model(**batch).loss
        loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return {"logits": logits.double(), "loss": loss.detach().double(), "gradients": grads.double()}


def _relative(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, float]:
    return {k: float((a[k] - b[k]).norm() / b[k].norm()) for k in b}


def tf32_effects(
    name: str,
    seed: int = 0,
    device: str | torch.device = "cpu",
    emulated: bool | None = None,
    rounding: str | None = None,
    float64: bool = True,
    gpu: str | None = None,
) -> dict[str, dict[str, float]]:
    """TF32's end-to-end effect on one model: evaluation logits, training loss, gradients.

    Each quantity is computed in float32 (``'highest'``; on a GPU also cuDNN's convolution
    switch off) and at ``'high'`` (on a GPU also convolutions in TF32, cuDNN's default),
    from the same weights and batch, and compared: ‖y_high − y_fp32‖ / ‖y_fp32‖. With
    ``float64``, the float32 run is also compared with a float64 copy of the model: float32's
    own error, the yardstick.

    Args:
        name: one of :data:`ARCHITECTURES`.
        seed: seed of the weights and the data.
        device: where to run (``"cpu"``, ``"cuda"``).
        emulated: TF32 emulated (:func:`eigprec.emulate_tf32`, forced on a GPU) or real;
            None: real where the device has TF32, emulated elsewhere.
        rounding: the emulator's TF32 rounding (None: its default, or the ``gpu``'s rule).
        float64: also measure float32 against float64.
        gpu: the GPU the emulator models (:func:`eigprec.emulate_tf32`'s ``gpu``):
            ``"hopper"`` keeps in float32 the small convolutions and batched products the
            book's H200 kept in float32; None rounds every product.

    Returns:
        ``{"high": {...}, "float32": {...}}``: each maps ``"logits"``, ``"loss"`` and
        ``"gradients"`` to a relative change (``"float32"`` only with ``float64``).

    Raises:
        ValueError: for ``emulated=False`` on a device without TF32.

    Example:
        >>> effects = tf32_effects("bert")
        >>> 2**-16 < effects["high"]["logits"] < 2**-8, effects["float32"]["logits"] < 2**-16
        (True, True)
    """
    device = torch.device(device)
    real = has_real_tf32(device)
    emulated = not real if emulated is None else emulated
    if not emulated and not real:
        raise ValueError(f"{device} has no TF32: pass emulated=True (or None)")
    model, batch = build_architecture(name, seed)
    model, batch = model.to(device), _to(batch, device, torch.float32)
    fp32 = _run(model, batch, _precision("float32", device, emulated, rounding))
    high = _run(model, batch, _precision("high", device, emulated, rounding, gpu))
    result = {"high": _relative(high, fp32)}
    if float64:
        fp64 = _run(
            model, _to(batch, device, torch.float64), contextlib.nullcontext(), torch.float64
        )
        result["float32"] = _relative(fp32, fp64)
    return result


def architecture_attribution(
    name: str, output: str = "logits", seed: int = 0, rounding: str | None = None
) -> Attribution:
    """:func:`eigprec.tf32_attribution` of one model: which product moves ``output`` most.

    Args:
        name: one of :data:`ARCHITECTURES`.
        output: ``"logits"`` (one evaluation) or ``"gradients"`` (one forward and backward
            in training mode: every gradient, concatenated).
        seed: seed of the weights and the data.
        rounding: TF32 rounding (None: the emulator's default).

    Returns:
        The :class:`~eigprec.audit.Attribution`; sites keyed by ``transformers``' lines and
        module paths.

    Raises:
        ValueError: for an unknown ``output``.

    Example:
        >>> found = architecture_attribution("gpt2")
        >>> found.sites[0].module
        'lm_head'
    """
    if output not in ("logits", "gradients"):
        raise ValueError(f"output must be 'logits' or 'gradients', got {output!r}")
    model, batch = build_architecture(name, seed)

    # [show:attribution]
    def block() -> dict[str, torch.Tensor]:
        copied = copy.deepcopy(model)
        if output == "logits":
            return {"logits": _evaluation(copied, batch)}
        copied(**batch).loss.backward()
        return {"gradients": torch.cat([p.grad.flatten() for p in copied.parameters()])}

    return tf32_attribution(block, rounding=rounding)
    # [/show:attribution]
