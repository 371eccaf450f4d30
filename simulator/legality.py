"""One home for the rules of a legal plan: what the simulator accepts and the search may propose.

The rules, each with its source:

* devices: ``tp * pp * dp`` devices, at most the machine's (Megatron-LM, Narayanan et al. SC'21 §3);
* expert parallelism: ``ep`` divides the routed experts and the ``dp * cp`` weight replicas
  (Megatron-Core carves expert-parallel groups from the data- and context-parallel ranks);
* tensor parallelism: ``tp`` divides the heads, the hidden and the FFN sizes of a transformer
  (Megatron-LM splits attention heads and GEMM columns/rows evenly, Shoeybi et al. 2019 §3), or
  ResNet-50's narrowest channel count (:data:`RESNET50_TP_CHANNELS`); sequence parallelism needs
  ``tp`` to divide the sequence (Korthikanti et al., MLSys'23 §4.2.2);
* pipeline: ``pp * num_chunks`` virtual stages, at most the partitionable units
  (:func:`partition_units`);
* batch: the microbatch ``b`` and ``dp`` divide the global batch ``B``; ``m = B / (b dp)``
  microbatches per replica (SC'21 §2.2);
* interleaved 1F1B: ``m % pp == 0`` (Megatron-LM's ``forward_backward_pipelining_with_interleaving``
  asserts it; SC'21 §2.2.2). The search also keeps Megatron's even layers per chunk,
  ``units % (pp v) == 0`` (:func:`megatron_interleaving`), which the simulator's balanced and
  explicit partitions do not need;
* precision: the hardware has a peak for it (``fp8``: and a bf16 peak and an FP8 GEMM efficiency);
* memory: each device holds its model states plus activations times the microbatches its stage
  holds in flight (GPipe ``m``, 1F1B ``p - i``; SC'21 §2.2; Korthikanti et al. §4): see
  :func:`stage_memory_bytes` and :func:`memory_shortfall`.

:func:`check_plan` applies every rule but memory and raises :class:`InputError`; ``spaces``
enumerates with the same predicates, so what the search proposes the simulator accepts.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from simulator.costs import MemoryBreakdown
from simulator.errors import InputError
from simulator.hardware.spec import Hardware
from simulator.schedules import PipelineSchedule, make_schedule
from simulator.strategy import Strategy
from simulator.workload.operators import RESNET50_STAGES, RESNET50_UNITS
from simulator.workload.spec import ModelSpec

RESNET50_TP_CHANNELS = min(width for _, width, _ in RESNET50_STAGES)
"""ResNet-50's narrowest channel count (64: stem and conv2_x, He et al. 2016 Table 1); tp divides it."""

TP_SPLIT_SIZES: tuple[str, ...] = ("num_heads", "hidden_size", "ffn_hidden_size")
"""Transformer sizes tensor parallelism splits evenly (Megatron-LM); the KV heads split evenly or
are each replicated on ``tp / kv_heads`` devices (:func:`kv_heads_split`). An attention split over
users (:attr:`~simulator.strategy.Strategy.attention_split`) needs only the sizes after the heads."""


def kv_heads_split(model: ModelSpec, tp: int) -> bool:
    """True if ``tp`` splits the KV heads evenly, or is a multiple of them (each head replicated
    on ``tp / kv_heads`` devices, as vLLM's ``QKVParallelLinear`` does for grouped-query attention)."""
    return model.kv_heads % tp == 0 or tp % model.kv_heads == 0


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in increasing order."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def partition_units(model: ModelSpec) -> int:
    """Units a pipeline can split: transformer layers, or ResNet-50's 18 (stem, 16 blocks, head)."""
    return model.num_layers if model.is_transformer else RESNET50_UNITS


def global_batch(model: ModelSpec, strategy_batch: int | None = None) -> int:
    """The strategy's global batch ``B`` if given, else the model's."""
    return strategy_batch or model.global_batch_size


def tp_divides(model: ModelSpec, tp: int, attention_split: str = "heads") -> bool:
    """True if ``tp`` splits the model's heads (where the attention is split by them), hidden and
    FFN, and its experts' (ResNet-50: its 64 channels)."""
    if not model.is_transformer:
        return RESNET50_TP_CHANNELS % tp == 0
    experts = model.expert_ffn_hidden_size % tp == 0 and model.shared_expert_size % tp == 0
    if attention_split != "heads":
        return all(getattr(model, key) % tp == 0 for key in TP_SPLIT_SIZES[1:]) and experts
    return all(getattr(model, key) % tp == 0 for key in TP_SPLIT_SIZES) and kv_heads_split(model, tp) and experts


def expert_parallel_legal(model: ModelSpec, ep: int) -> bool:
    """True if ``ep`` splits the model's routed experts evenly (Megatron-Core's
    ``num_moe_experts % expert_model_parallel_size == 0``); only 1 for a dense model."""
    return ep == 1 or (model.is_moe and model.num_experts % ep == 0)


def _check_expert_parallel(model: ModelSpec, strategy: Strategy) -> None:
    """:func:`expert_parallel_legal` for the strategy.

    An ``etp`` below ``tp`` needs sequence parallelism, as Megatron-Core's ``TransformerConfig``
    requires with expert and tensor parallelism together: the experts take each rank's own
    sequence shard.

    Raises:
        InputError: naming ``ep`` and the experts, or ``etp``.
    """
    if not expert_parallel_legal(model, strategy.ep):
        raise InputError(f"strategy: `ep` = {strategy.ep} must divide the {model.num_experts} routed experts of"
                         f" {model.name} (1 for a dense model)")
    if model.is_moe and strategy.expert_tp != strategy.tp and not strategy.sequence_parallel:
        raise InputError(f"strategy: `etp` = {strategy.etp} below tp = {strategy.tp} needs sequence_parallel"
                         " (Megatron-Core: expert and tensor parallelism need sequence parallelism)")


def sequence_parallel_legal(model: ModelSpec, tp: int) -> bool:
    """True if ``tp`` divides the sequence (Korthikanti et al. §4.2.2); ResNet-50 has none."""
    return model.is_transformer and model.sequence_length % tp == 0


def megatron_interleaving(units: int, pp: int, num_chunks: int) -> bool:
    """Megatron-LM's even split of layers over ``pp * num_chunks`` model chunks (SC'21 §2.2.2)."""
    return pp > 1 and units % (pp * num_chunks) == 0


def interleaving_legal(pp: int, num_microbatches: int) -> bool:
    """Interleaved 1F1B runs microbatches in groups of ``pp`` (Megatron-LM): ``m % pp == 0``."""
    return num_microbatches % pp == 0


def num_microbatches(model: ModelSpec, strategy: Strategy) -> int:
    """Microbatches per replica per iteration, ``B / (b * dp)``.

    Raises:
        InputError: the global batch is not a multiple of ``microbatch_size * dp``.
    """
    batch = global_batch(model, strategy.global_batch_size)
    per_step = strategy.microbatch_size * strategy.dp
    if batch % per_step:
        raise InputError(
            f"strategy: global batch {batch} must be a multiple of microbatch_size * dp ="
            f" {strategy.microbatch_size}*{strategy.dp} = {per_step}"
        )
    return batch // per_step


def _check_tensor_parallel(model: ModelSpec, strategy: Strategy) -> None:
    tp = strategy.tp
    if not model.is_transformer:
        if not tp_divides(model, tp):
            raise InputError(f"model {model.name!r}: tp = {tp} must divide {RESNET50_TP_CHANNELS} channels")
        return
    by_heads = strategy.attention_split == "heads"
    for key in TP_SPLIT_SIZES if by_heads else TP_SPLIT_SIZES[1:]:
        if getattr(model, key) % tp:
            raise InputError(f"model {model.name!r}: `{key}` = {getattr(model, key)} is not divisible by tp = {tp}")
    if by_heads and not kv_heads_split(model, tp):
        raise InputError(f"model {model.name!r}: tp = {tp} neither divides nor is a multiple of its"
                         f" {model.kv_heads} KV heads")
    for key in ("expert_ffn_hidden_size", "shared_expert_size"):
        if getattr(model, key) % tp:
            raise InputError(f"model {model.name!r}: `{key}` = {getattr(model, key)} is not divisible by tp = {tp}")
    if strategy.sequence_parallel and not sequence_parallel_legal(model, tp):
        raise InputError(f"model {model.name!r}: sequence parallelism needs tp = {tp} to divide"
                         f" `sequence_length` = {model.sequence_length}")


def context_parallel_legal(model: ModelSpec, hardware: Hardware, cp: int) -> bool:
    """True if the model can split each sequence over ``cp`` devices on the machine: ``cp == 1``,
    or a transformer whose sequence splits into ``2 cp`` chunks (rank ``r`` takes chunks ``r`` and
    ``2cp - 1 - r`` so causal attention's work balances: Megatron-LM context parallelism; Llama 3
    §3.3.2) on hardware whose attention runs fused by default (ring attention runs
    FlashAttention blocks over the ring's keys and values)."""
    return cp == 1 or (model.is_transformer and model.sequence_length % (2 * cp) == 0
                       and attention_of(model, hardware, Strategy()) == "fused")


def _check_context_parallel(model: ModelSpec, hardware: Hardware, strategy: Strategy) -> None:
    """:func:`context_parallel_legal` for the strategy, whose attention must also be fused, and
    ``tp`` dividing a rank's ``s / cp`` tokens with sequence parallelism."""
    cp = strategy.cp
    if cp == 1:
        return
    if not model.is_transformer or model.sequence_length % (2 * cp):
        raise InputError(f"model {model.name!r}: context parallelism needs a transformer whose sequence"
                         f" {model.sequence_length} splits into 2*cp = {2 * cp} chunks")
    if strategy.sequence_parallel and (model.sequence_length // cp) % strategy.tp:
        raise InputError(f"model {model.name!r}: sequence parallelism needs tp = {strategy.tp} to divide the"
                         f" {model.sequence_length // cp} tokens of a context-parallel rank")
    if attention_of(model, hardware, strategy) != "fused":
        raise InputError(f"strategy: context parallelism (cp = {cp}) runs attention fused, as ring attention does;"
                         f" hardware {hardware.name!r} states no fused attention or attention is 'unfused'")


def wafer_straddle(hardware: Hardware, devices_per_stage: int, pp: int) -> int | None:
    """The first of ``pp`` stages of ``devices_per_stage`` devices that a cut of an order walked
    wafer by wafer (``wafer_stages = "within"``) puts on two wafers, or None when every stage is on
    one: stage ``i`` holds positions ``i S .. (i + 1) S - 1`` of the walk, wafer ``w`` positions
    ``w W .. (w + 1) W - 1`` (``W`` devices a wafer, :attr:`Network.wafers`)."""
    per_wafer = hardware.num_devices // hardware.network.wafers
    return next((i for i in range(pp)
                 if i * devices_per_stage // per_wafer != ((i + 1) * devices_per_stage - 1) // per_wafer), None)


def _check_devices(hardware: Hardware, strategy: Strategy) -> None:
    if strategy.num_devices > hardware.num_devices:
        raise InputError(
            f"strategy: `tp * cp * pp * dp` = {strategy.tp}*{strategy.cp}*{strategy.pp}*{strategy.dp} ="
            f" {strategy.num_devices} devices, the machine has {hardware.num_devices}"
        )
    stage = (wafer_straddle(hardware, strategy.devices_per_stage, strategy.pp)
             if strategy.wafer_stages == "within" else None)
    if stage is not None:
        raise InputError(f"strategy: `wafer_stages` 'within': stage {stage} of {strategy.devices_per_stage}"
                         f" devices would cross a wafer boundary (a wafer has"
                         f" {hardware.num_devices // hardware.network.wafers})")
    bad = [d for s in strategy.stage_devices or () for d in s if not 0 <= d < hardware.num_devices]
    if bad:
        raise InputError(f"strategy: `stage_devices` has id {bad[0]} outside 0..{hardware.num_devices - 1}")


def _check_pipeline(model: ModelSpec, strategy: Strategy) -> None:
    virtual, units = strategy.pp * strategy.num_chunks, partition_units(model)
    if virtual > units:
        raise InputError(f"model {model.name!r}: `pp * num_chunks` = {virtual} exceeds its {units} layers")
    if strategy.stage_layers is not None and (sum(strategy.stage_layers) != units or min(strategy.stage_layers) < 1):
        raise InputError(f"strategy: `stage_layers` must be >= 1 each and sum to {units} layers,"
                         f" got {list(strategy.stage_layers)}")


def check_formats(hardware: Hardware, strategy: Strategy) -> None:
    """The number formats of ``strategy`` that ``hardware`` must offer (they depend on no model or
    degree: a search checks them once for its fixed values).

    Raises:
        InputError: a precision without a peak, fp8 without a bf16 peak and the calibration
            ``fp8_gemm_efficiency``, or a math fidelity the hardware does not offer.
    """
    if strategy.precision not in hardware.compute.peak_flop_per_s:
        raise InputError(
            f"strategy: precision {strategy.precision!r} has no peak on hardware {hardware.name!r}"
            f" (has {sorted(hardware.compute.peak_flop_per_s)})"
        )
    if strategy.precision == "fp8" and (hardware.calibration.fp8_gemm_efficiency is None
                                        or "bf16" not in hardware.compute.peak_flop_per_s):
        raise InputError(
            f"strategy: precision 'fp8' (FP8 GEMMs, bfloat16 elsewhere) needs a bf16 peak and"
            f" calibration `fp8_gemm_efficiency` on hardware {hardware.name!r}"
        )
    if strategy.math_fidelity is not None and strategy.math_fidelity not in hardware.compute.math_fidelity_phases:
        raise InputError(
            f"strategy: math_fidelity {strategy.math_fidelity!r} is not offered by hardware {hardware.name!r}"
            f" (offers {sorted(hardware.compute.math_fidelity_phases) or 'none'})"
        )


def attention_of(model: ModelSpec, hardware: Hardware, strategy: Strategy) -> str:
    """How the strategy's attention runs on ``hardware``: ``fused`` or ``unfused`` (``auto`` is
    fused where the hardware states the fused kernel's efficiency and keeps memory local).

    Raises:
        InputError: ``fused`` on hardware that states no fused-attention efficiency, or whose
            DRAM traffic is planned over a mesh (the kernel is costed as GPUs run it).
    """
    stated = hardware.calibration.fused_attention_efficiency is not None
    local = hardware.memory.sram_dataflow() is None
    if strategy.attention == "fused" and not (stated and local):
        why = "states no fused_attention_efficiency" if not stated else "plans DRAM traffic over a mesh"
        raise InputError(f"strategy: attention 'fused' needs a FlashAttention kernel; hardware {hardware.name!r} {why}")
    if strategy.attention == "auto":
        return "fused" if stated and local and model.is_transformer else "unfused"
    return strategy.attention


def _check_generation(model: ModelSpec, strategy: Strategy) -> None:
    """A prompt and a decode context within the model's context (its ``sequence_length``); a
    decode step only of a causal decoder (GPT, LLaMA), without context parallelism.

    Raises:
        InputError: naming the field and value.
    """
    for name in ("prompt_length", "decode_context_length"):
        value = getattr(strategy, name)
        if value and value > model.sequence_length:
            raise InputError(f"strategy: `{name}` = {value} exceeds the context of {model.name},"
                             f" {model.sequence_length} tokens")
    if strategy.decoding and not model.is_causal:
        raise InputError(f"strategy: `decode_context_length` needs a causal decoder (gpt, llama), not"
                         f" {model.name} ({model.architecture})")
    if strategy.decoding and strategy.cp > 1:
        raise InputError(f"strategy: a decode step has one token per sample, no sequence to split over cp ="
                         f" {strategy.cp}")


def check_workload(model: ModelSpec, hardware: Hardware, strategy: Strategy) -> None:
    """The rules the model's split into stages needs (what :func:`build_stage_costs` costs).

    Raises:
        InputError: precision without a peak, a math fidelity the hardware does not offer, fused
            attention the hardware does not offer, tp
            not dividing the model (or the sequence, with sequence parallelism), more virtual
            stages than units, explicit ``stage_layers`` not summing to the units, or a
            microbatch larger than the global batch, or context parallelism off a transformer,
            with a sequence ``2 cp`` does not split, or without fused attention, or ``ep`` not
            dividing the routed experts, or a recompute module the model does not have.
    """
    check_formats(hardware, strategy)
    attention_of(model, hardware, strategy)
    _check_context_parallel(model, hardware, strategy)
    _check_tensor_parallel(model, strategy)
    _check_expert_parallel(model, strategy)
    _check_recompute_modules(model, strategy)
    _check_pipeline(model, strategy)
    _check_generation(model, strategy)
    batch = global_batch(model, strategy.global_batch_size)
    if strategy.microbatch_size > batch:
        raise InputError(f"strategy: `microbatch_size` = {strategy.microbatch_size} exceeds the global batch {batch}")


_MODULE_NEEDS = {"moe_act": ("is_moe", "Mixture-of-Experts layers"), "moe": ("is_moe", "Mixture-of-Experts layers"),
                 "shared_experts": ("num_shared_experts", "shared experts"),
                 "mla_up_proj": ("uses_latent_attention", "multi-head latent attention")}
"""What each model-specific recompute module needs (as Megatron-Core refuses ``moe_act`` without
grouped-GEMM experts and ``mla_up_proj`` without latent attention)."""


def _check_recompute_modules(model: ModelSpec, strategy: Strategy) -> None:
    for module in sorted(strategy.recomputed_modules & _MODULE_NEEDS.keys()):
        attribute, what = _MODULE_NEEDS[module]
        if not getattr(model, attribute):
            raise InputError(f"strategy: `recompute_modules` names {module!r}, which needs {what}; model"
                             f" {model.name!r} has none")


def check_plan(model: ModelSpec, hardware: Hardware, strategy: Strategy) -> int:
    """Apply every rule of a legal plan but memory; return ``m``, the microbatches per replica.

    Raises:
        InputError: the first rule broken, naming the field and value: as :func:`check_workload`,
            and too many devices or an explicit device id off the machine, a microbatch times
            ``dp`` not dividing the batch, interleaving with ``m % pp != 0``, or stages kept
            within wafers (``wafer_stages = "within"``) that one would cross.
    """
    check_workload(model, hardware, strategy)
    _check_devices(hardware, strategy)
    m = num_microbatches(model, strategy)
    if strategy.schedule == "interleaved-1f1b" and not interleaving_legal(strategy.pp, m):
        raise InputError(f"strategy: interleaved-1f1b needs microbatches per replica divisible by pp ="
                         f" {strategy.pp}, got {m}")
    return m


def schedule_of(strategy: Strategy) -> PipelineSchedule:
    """The strategy's pipeline schedule."""
    return make_schedule(strategy.schedule, strategy.pp, strategy.num_chunks, int(strategy.ep_overlap))


def microbatches_in_flight(strategy: Strategy, num_microbatches: int) -> list[list[int]]:
    """Per pipeline stage, per chunk: most microbatches whose activations it holds at once.

    Training: the schedule's count (GPipe ``m``, 1F1B ``min(p - i, m)``, SC'21 §2.2); inference
    keeps one microbatch per chunk (nothing is stashed for a backward).
    """
    if not strategy.training:
        return [[1] * strategy.num_chunks for _ in range(strategy.pp)]
    peaks = _schedule_in_flight(strategy.schedule, strategy.pp, strategy.num_chunks, num_microbatches,
                                int(strategy.ep_overlap))
    return [list(chunks) for chunks in peaks]


@lru_cache(maxsize=1024)
def _schedule_in_flight(schedule: str, pp: int, num_chunks: int, num_microbatches: int,
                        extra_warmup: int = 0) -> tuple[tuple[int, ...], ...]:
    """:meth:`PipelineSchedule.max_in_flight` of every stage, kept: a memory pre-screen asks the
    same schedule under many plans."""
    order = make_schedule(schedule, pp, num_chunks, extra_warmup)
    return tuple(tuple(order.max_in_flight(stage, num_microbatches)) for stage in range(pp))


def stage_memory_bytes(memory: Sequence[MemoryBreakdown], pp: int, in_flight: Sequence[Sequence[int]]) -> list[float]:
    """Bytes one device of each pipeline stage holds: its chunks' model states plus activations
    times microbatches in flight (``memory`` indexed by virtual stage ``c * pp + i``)."""
    return [sum(c.total_bytes(n) for c, n in zip(memory[stage::pp], in_flight[stage], strict=True))
            for stage in range(pp)]


def memory_shortfall(hardware: Hardware, memory_bytes: Sequence[float], in_flight: Sequence[Sequence[int]],
                     devices_per_stage: int = 1) -> str:
    """Why the plan does not fit the device memory, or ``""`` when every stage fits.

    Where the machine pools its memory (:meth:`~simulator.hardware.spec.Memory.pool_bytes`:
    a tiled chip whose tensors are interleaved over all its DRAM banks), the plan's devices
    together must fit the pool; elsewhere each device its own share."""
    pool = hardware.memory_pool_bytes(devices_per_stage * len(memory_bytes))
    if pool is not None:
        needed = devices_per_stage * sum(memory_bytes)
        return "" if needed <= pool else (
            f"the plan's {devices_per_stage * len(memory_bytes)} devices need {needed / 2**30:.2f} GiB of"
            f" DRAM, the pool they share holds {pool / 2**30:.2f} GiB")
    capacity = hardware.device_memory_bytes()
    worst = max(range(len(memory_bytes)), key=memory_bytes.__getitem__)
    if memory_bytes[worst] <= capacity:
        return ""
    return (f"stage {worst} needs {memory_bytes[worst] / 2**30:.2f} GiB per device"
            f" ({sum(in_flight[worst])} microbatches in flight), capacity {capacity / 2**30:.2f} GiB")
