"""The parallel training (or inference) plan as data.

A :class:`Strategy` is what the search proposes and what the simulator evaluates: degrees of
tensor (``tp``), pipeline (``pp``) and data (``dp``) parallelism, microbatching, schedule,
recompute, ZeRO, precision, stage partition, placement of stages on the mesh and the layout of
communication groups. Degrees follow Megatron-LM (Narayanan et al., SC'21, §2-3); the placement
and comm-group options follow PALM (Fang et al., arXiv 2406.03868, §V-B, Fig. 8; §V-C, Fig. 11).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from functools import lru_cache
from types import UnionType
from typing import Any, Literal, NamedTuple, Union, get_args, get_origin, get_type_hints

from simulator.errors import InputError


def _field(default: Any, *, help: str = "", placed: bool = False, where: bool = False, column: bool = False,
           flag: bool = True, dimension: str | None = None) -> Any:
    """A :class:`Strategy` field with what reads it, as metadata (one list of fields for every
    reader: :func:`strategy_fields`).

    Args:
        default: the field's default.
        help: the help text of its ``palm-search simulate`` flag; ``{choices}`` in it is replaced
            by a Literal field's values (:func:`strategy_flags`).
        placed: :func:`simulator.placement.place` reads it (which devices stages and groups use).
        where: it says where stages sit and how they talk, and no stage cost reads it.
        column: a column of a search's trials table (what the search varies).
        flag: ``palm-search simulate`` has a flag of its name built from the field
            (:func:`strategy_flags`); False: the command parses it itself (the explicit lists).
        dimension: the search dimension that decides it (:data:`spaces.DIMENSIONS`, whose
            fields are those naming it); None: no search dimension does.
    """
    return field(default=default, metadata={"help": help, "placed": placed, "where": where, "column": column,
                                            "flag": flag, "dimension": dimension})


Schedule = Literal["gpipe", "1f1b", "interleaved-1f1b", "zb-h1"]
Recompute = Literal["none", "selective", "full"]
Optimizer = Literal["sgd", "adam"]
Precision = Literal["fp32", "fp16", "bf16", "fp8", "int8", "bfloat8_b", "bfloat4_b"]
Mode = Literal["training", "inference"]
PartitionKind = Literal["balanced", "uniform", "explicit"]
GroupLayout = Literal["compact", "strided"]
GroupOrder = Literal["tp-major", "dp-major"]
WaferStages = Literal["span", "within"]
Attention = Literal["auto", "unfused", "fused"]
AttentionSplit = Literal["heads", "users"]

SCHEDULES: tuple[str, ...] = get_args(Schedule)
ATTENTION_SPLITS: tuple[str, ...] = get_args(AttentionSplit)
RECOMPUTES: tuple[str, ...] = get_args(Recompute)
FP8_RECIPES: tuple[str, ...] = ("delayed", "current", "blockwise")
"""Transformer Engine's FP8 scaling recipes on Hopper (``DelayedScaling``, TE's default;
``Float8CurrentScaling``; ``Float8BlockScaling``): how each step computes its scaling factors,
which the hardware prices (:meth:`simulator.hardware.spec.Calibration.fp8_efficiency`)."""
RECOMPUTE_MODULES: tuple[str, ...] = ("core_attn", "layernorm", "moe_act", "mlp", "moe", "shared_experts",
                                      "mla_up_proj")
"""What selective recompute may re-run, Megatron-Core's ``recompute_modules`` (``TransformerConfig``,
``megatron/core/transformer/transformer_config.py``): the attention core, the two norms, the
routed experts' activation, the dense MLP, the MoE layer, its shared experts, MLA's up-projections;
default ``core_attn``."""
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
PRECISIONS: tuple[str, ...] = get_args(Precision)
MODES: tuple[str, ...] = get_args(Mode)
PARTITIONS: tuple[str, ...] = get_args(PartitionKind)
PLACEMENTS: tuple[str, ...] = ("line", "s-shape", "s-shape-transposed", "s-shape-east", "s-shape-south",
                               "s-shape-rotated", "row-snake", "column-snake", "hilbert", "explicit")
"""Placement names: the device orders machines offer (each kind a subset, see
:meth:`simulator.network.topology.Topology.device_orders`; a test checks), and ``explicit``."""
GROUP_LAYOUTS: tuple[str, ...] = get_args(GroupLayout)
GROUP_ORDERS: tuple[str, ...] = get_args(GroupOrder)
WAFER_STAGES: tuple[str, ...] = get_args(WaferStages)
"""Where a machine of several wafers cuts stages: from an order over all its wafers as one grid
(``span``: a stage may cross a wafer boundary) or from the order walked wafer by wafer, every stage
on one wafer (``within``; :meth:`simulator.network.topology.Topology.wafer_device_orders`)."""
ATTENTIONS: tuple[str, ...] = get_args(Attention)
"""How attention's core runs: ``unfused`` (score GEMM, softmax, dropout, value GEMM as kernels
of their own, the ``s x s`` scores in memory), ``fused`` (one FlashAttention kernel, Dao et al.),
``auto``: fused where the hardware states the kernel's efficiency
(:func:`simulator.legality.attention_of`)."""
TRANSFER_STRATEGIES: tuple[int, ...] = (1, 2)
MATH_FIDELITIES: tuple[str, ...] = ("LoFi", "HiFi2", "HiFi3", "HiFi4")
"""Math fidelities of Tenstorrent's matrix engine, fewest passes first (tt-metal
``tech_reports/matrix_engine``: each pass multiplies 5 bits of ``SrcA`` by 7 of ``SrcB``)."""
ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)
"""ZeRO stages: nothing sharded, optimizer states, + gradients, + weights (Rajbhandari et al., SC'20)."""

BYTES_PER_ELEMENT: dict[str, float] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 2, "int8": 1,
                                       "bfloat8_b": 1 + 1 / 16, "bfloat4_b": 0.5 + 1 / 16}
"""Bytes per element of each precision: IEEE 754 binary32 / binary16, bfloat16, int8, and
Tenstorrent's block floats, whose 16 values share one exponent byte (a 32 x 32 tile of
``bfloat8_b`` is 1024 mantissa bytes and 64 exponent bytes, 1088 B; ``bfloat4_b`` 512 + 64 = 576 B;
Tenstorrent ttnn documentation, "Tensor: Data Type", and tt-metal ``tile.hpp`` tile sizes).
``fp8`` is Transformer Engine's recipe (NVIDIA Transformer Engine; Micikevicius et al., "FP8
Formats for Deep Learning", arXiv 2209.05433): the linear layers' GEMMs run in FP8, weights,
activations and communication stay in bfloat16, so its element is bfloat16's 2 bytes (what it
saves in memory is counted in :mod:`simulator.workload.memory`)."""

FORMAT_BYTES: dict[str, float] = {**BYTES_PER_ELEMENT, "fp8_e4m3": 1}
"""Bytes per element of the data formats a serving stack may store weights or the KV cache in
(:class:`simulator.stacks.spec.Serving`): the precisions, and ``fp8_e4m3``, an FP8 value of one
byte (E4M3; Micikevicius et al., arXiv 2209.05433, §3), stored as such (TensorRT-LLM's
``--enable_fp8`` weights and ``--fp8_kv_cache``), unlike precision ``fp8``'s bfloat16 storage."""

WORKING_PRECISION: dict[str, str] = {"fp8": "bf16"}
"""The precision of everything but the FP8 GEMMs, where it differs from the strategy's."""


def is_inference(mode: object) -> bool:
    """Whether a workload of ``mode`` (a :class:`Strategy`'s, a study's, a saved summary's ``mode``;
    None where none is saved: the default, training) runs forward passes only: the one place a mode
    is read (:attr:`Strategy.training` and every reader of a mode outside the simulator ask here)."""
    return mode == "inference"


def _spoken(values: tuple[object, ...]) -> str:
    """``values`` as a help text lists them: ``"a, b or c"``."""
    words = [str(value) for value in values]
    return f"{', '.join(words[:-1])} or {words[-1]}" if len(words) > 1 else "".join(words)


def _check_ep_overlap(strategy: Strategy) -> None:
    """``ep_overlap`` as Megatron-Core allows it (``TransformerConfig`` checks of
    ``overlap_moe_expert_parallel_comm``): expert parallelism, training, interleaved 1F1B (or one
    stage's 1F1B: "virtual_pipeline_model_parallel_size must be specified when
    pipeline_model_parallel_size > 1"), neither full recompute nor the MoE layer's."""
    one_stage = strategy.schedule == "1f1b" and strategy.pp == 1
    if strategy.ep == 1 or not strategy.training or not (one_stage or strategy.schedule == "interleaved-1f1b"):
        raise InputError(f"strategy: `ep_overlap` needs ep > 1, mode 'training' and schedule 'interleaved-1f1b'"
                         f" (or '1f1b' with pp 1), got ep {strategy.ep}, {strategy.mode!r}, {strategy.schedule!r}"
                         f" with pp {strategy.pp}")
    if strategy.recompute == "full" or "moe" in strategy.recomputed_modules:
        raise InputError("strategy: `ep_overlap` does not go with full recompute or recompute module 'moe'")


def _check_recompute_modules(strategy: Strategy) -> None:
    """``recompute_modules`` names :data:`RECOMPUTE_MODULES` and, other than the default, goes
    with selective recompute."""
    modules = strategy.recompute_modules
    names = modules.split(",") if isinstance(modules, str) else []
    if not names or any(name not in RECOMPUTE_MODULES for name in names):
        raise InputError(f"strategy: `recompute_modules` must be a comma-separated list of {list(RECOMPUTE_MODULES)},"
                         f" got {modules!r}")
    if modules != "core_attn" and strategy.recompute != "selective":
        raise InputError(f"strategy: `recompute_modules` = {modules!r} needs recompute 'selective', got"
                         f" {strategy.recompute!r}")


def _choice(name: str, value: object, allowed: tuple[object, ...]) -> None:
    if value not in allowed:
        raise InputError(f"strategy: `{name}` must be one of {list(allowed)}, got {value!r}")


MAX_GLOBAL_BATCH_SIZE = 2**24
"""Largest global batch a strategy or a model file may give, in samples: about 100x the largest
published batches, so a typo or a wrong unit is refused instead of enumerated for hours (the
search lists the divisors of a replica's batch)."""


def _positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(f"strategy: `{name}` must be an integer >= 1, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Strategy:
    """One mapping of a model onto a machine.

    Attributes:
        tp: tensor-parallel degree (devices sharing each layer's GEMMs, Megatron §2.3).
        pp: pipeline-parallel degree (number of pipeline stages).
        dp: data-parallel degree (model replicas). ``tp * cp * pp * dp`` devices are used.
        cp: context-parallel degree: each sample's sequence is split over ``cp`` devices, which
            pass the attention's keys and values around a ring (ring attention, as Megatron-LM's
            context parallelism and Llama 3's training run it: Liu et al., "Ring Attention",
            ICLR'24; Dubey et al., "The Llama 3 Herd of Models", 2024, §3.3.2). Ranks are
            ordered TP fastest, then CP, then DP (Megatron-LM's ``tp-cp-ep-dp-pp``); the ``dp *
            cp`` ranks of a stage hold the same weights and reduce gradients together.
        ep: expert-parallel degree of a Mixture-of-Experts model: each MoE layer's routed
            experts are split over ``ep`` devices that exchange tokens by all-to-all (Lepikhin et
            al., "GShard", ICLR'21). The groups are carved from a stage's ``dp * cp`` weight
            replicas, ``ep`` consecutive ones (Megatron-Core's ``tp-cp-ep-dp-pp`` order: ``ep``
            divides ``dp * cp``); expert gradients are reduced over the ``dp * cp / ep`` ranks
            holding the same experts. 1 for dense models. With :attr:`etp` other than ``tp``
            the groups are carved from all the stage's ranks instead (below).
        etp: expert tensor-parallel degree (Megatron-Core's ``expert_tensor_parallel_size``):
            each routed expert's FFN is split over ``etp`` ranks. ``None`` (the default) is
            ``tp``, the layout above. Otherwise (1 or ``tp``: other values are not modelled)
            Megatron-Core's expert rank order ``etp-ep-edp`` cuts the stage's ``tp * cp * dp``
            ranks (in their TP-fastest order) into expert-TP groups of ``etp`` consecutive ranks,
            EP groups of ``ep`` ranks ``etp`` apart (so an EP group may span TP ranks), and
            expert-data-parallel groups of ``tp * cp * dp / (ep * etp)`` ranks
            (``megatron/core/parallel_state.py``, ``initialize_model_parallel``: the
            ``expert_tensor_and_model_parallel`` and ``expert_data_parallel`` groups of its
            expert ``RankGenerator``). ``ep * etp`` divides ``tp * cp * dp``; ``etp`` below
            ``tp`` needs ``sequence_parallel`` (:func:`simulator.legality.check_plan`).
        microbatch_size: samples per microbatch ``b``.
        global_batch_size: samples per iteration ``B``; ``B / (b * dp)`` is the number of
            microbatches ``m`` per replica per iteration. ``None`` takes the model's.
        schedule: ``gpipe``, ``1f1b`` or ``interleaved-1f1b`` (Narayanan et al. SC'21 §2.2), or
            ``zb-h1`` (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24 §2.1).
        num_chunks: model chunks per device ``v`` for ``interleaved-1f1b`` (1 otherwise).
        recompute: activation recomputation ``none``, ``selective`` (the ``recompute_modules``)
            or ``full`` (Korthikanti et al., MLSys'23).
        recompute_modules: under ``selective``, the comma-separated :data:`RECOMPUTE_MODULES`
            whose activations are dropped in the forward and recomputed in the backward
            (Megatron-Core's ``--recompute-modules``; default ``core_attn``, Korthikanti's
            selective recompute).
        sequence_parallel: shard layernorm/dropout activations over the TP group (same source).
        tp_overlap: hide each transformer layer's backward TP collectives behind its
            weight-gradient GEMMs, as Megatron-LM overlaps the input-gradient all-reduce with
            the linear weight's gradient (Korthikanti et al., MLSys'23, §6.2; the sequence-
            parallel all-gather, §4.2.2). Recompute and forward collectives stay exposed.
        ep_overlap: Megatron-Core's expert-parallel all-to-all overlap
            (``--overlap-moe-expert-parallel-comm``): in the 1F1B phase a forward and the next
            backward run merged, each one's all-to-alls under the other's compute ("backward
            all-to-all for one micro-batch overlaps with forward attention/MLP for another",
            NVIDIA, "Scalable Training of Mixture-of-Experts Models with Megatron Core", arXiv
            2603.07685, §4.2.3); the warm-up forwards, one more than the schedule's own, and the
            last backwards keep theirs exposed. Needs ``ep > 1``, training and interleaved 1F1B
            (or 1F1B on one stage), without full recompute or the MoE layer's.
        p2p_blocking: a stage waits for each of its pipeline sends to end before it computes
            on, as Megatron-LM's ``p2p_communication._communicate`` waits on every
            ``batch_isend_irecv`` request and synchronises the device; False lets sends overlap
            the next pass (PALM's pipeline, §IV-A).
        zero_stage: 0-3; shards optimizer states / + gradients / + weights over DP
            (Rajbhandari et al., SC'20).
        shard_group_size: with ZeRO-3, shard over groups of this many data-parallel ranks and
            replicate across the groups: PyTorch FSDP's ``HYBRID_SHARD`` with sharding factor
            ``F`` (Zhao et al., VLDB'23, §3.2.2), DeepSpeed MiCS's partition group (Zhang et al.,
            VLDB'22, §3.2); gathers and reduce-scatters stay in the group, the sharded gradients
            are all-reduced across the ``dp / F`` replicas once per iteration (MiCS §3.3).
            None: over all ``dp`` ranks.
        optimizer: ``sgd`` or ``adam`` (PALM Table II).
        precision: ``fp16``, ``bf16``, ``fp32``, ``int8`` or a block float (``bfloat8_b``, ``bfloat4_b``)
            arithmetic and storage; ``fp8``: a transformer layer's linear GEMMs in FP8 and
            everything else in bfloat16 (Transformer Engine, :data:`BYTES_PER_ELEMENT`).
        fp8_recipe: with ``fp8``, Transformer Engine's scaling recipe (:data:`FP8_RECIPES`).
        mode: ``training`` or ``inference`` (inference has no backward or gradient update).
        partition: ``balanced`` (by compute), ``uniform`` (by layer count) or ``explicit``.
        stage_layers: with ``partition="explicit"``, the number of layers on each of the
            ``pp * num_chunks`` virtual stages, in order.
        placement: a device order of the machine that stages are cut from (PALM Fig. 8:
            ``line`` row-major, ``s-shape`` boustrophedon; on a mesh also ``s-shape-transposed``,
            ``s-shape-east`` / ``-south`` / ``-rotated``, ``row-snake``, ``column-snake``,
            ``hilbert``; see :mod:`simulator.network.mesh`), or ``explicit``.
        stage_devices: with ``placement="explicit"``, the device ids of each stage
            (``pp`` tuples of ``tp * cp * dp`` ids).
        group_layout: TP groups ``compact`` (neighbouring devices) or ``strided``
            (PALM Fig. 8, comm1 vs comm2).
        group_order: ``tp-major`` (TP ranks vary fastest, as Megatron) or ``dp-major``.
        wafer_stages: on a machine of several wafers, ``span``: stages cut from ``placement``'s
            order over all wafers as one grid (a stage may cross a wafer boundary); ``within``:
            from the order walked wafer by wafer, no stage crossing a boundary
            (:data:`WAFER_STAGES`; :func:`simulator.legality.wafer_straddle`). The same on one wafer.
        transfer_strategy: inter-group p2p strategy 1 or 2 (PALM §V-C, Fig. 11, Eqs. 7-8).
        math_fidelity: ``LoFi``, ``HiFi2``, ``HiFi3`` or ``HiFi4``: the matrix engine runs the
            hardware's ``math_fidelity_phases`` passes per product, dividing its peak; ``None``
            runs at the stated peak (one pass: ttnn's default ``WormholeComputeKernelConfig``
            is ``LoFi``). Only on hardware that lists fidelities.
        prompt_length: inference: tokens of each sample's prompt (the prefill's sequence; default
            the model's ``sequence_length``, which is also the longest context it takes).
        attention_split: how a tensor-parallel group divides the attention core: ``heads``
            (Megatron-LM: a device computes ``a / t`` heads for every sample; beyond the KV heads
            each KV head is replicated on ``t / kv_heads`` devices, as vLLM does) or ``users``
            (inference only: the group's devices share out (sample, KV head) pairs, as tt-metal's
            decode attention runs over a chip's core grid, parallel over users and heads
            (``scaled_dot_product_attention_decode``; tt-metal ``tech_reports/LLMs/llms.md``
            §2.4), so no KV head is replicated until ``t`` exceeds ``b kv_heads``; ``t`` need
            not divide the heads). The linear layers stay split as Megatron-LM splits them.
        decode_context_length: inference: 0 runs the whole prompt forward (prefill, an encoder,
            a CNN); ``c > 0`` runs one decode step: each sample (a user) adds one token that
            attends to a KV cache of ``c`` tokens (its context, the new token included), as
            autoregressive generation does (Pope et al., "Efficiently Scaling Transformer
            Inference", MLSys'23, §2).

    Raises:
        InputError: a field is out of its domain (message names the field and value).
    """

    tp: int = _field(1, help="Tensor-parallel degree.", placed=True, column=True, dimension="degrees")
    pp: int = _field(1, help="Pipeline-parallel degree (stages).", placed=True, column=True, dimension="degrees")
    dp: int = _field(1, help="Data-parallel degree.", placed=True, column=True, dimension="degrees")
    cp: int = _field(1, help="Context-parallel degree: each sequence split over cp devices (ring attention).",
                     placed=True, column=True, dimension="degrees")
    ep: int = _field(1, help="Expert-parallel degree of a Mixture-of-Experts model: its routed experts split over ep"
                     " of the dp*cp ranks (all-to-all dispatch).", placed=True, column=True, dimension="degrees")
    etp: int | None = _field(None, help="Expert tensor-parallel degree: each routed expert split over etp ranks (1 or"
                             " tp; default tp). With etp 1, ep*etp divides tp*cp*dp.", placed=True, column=True,
                             dimension="degrees")
    microbatch_size: int = _field(1, help="Samples per microbatch.", column=True, dimension="microbatch_size")
    global_batch_size: int | None = _field(None, help="Samples per iteration (default: model's).")
    schedule: Schedule = _field("1f1b", help="{choices}.", column=True, dimension="schedule")
    num_chunks: int = _field(1, help="Model chunks per stage (interleaved).", column=True, dimension="schedule")
    recompute: Recompute = _field("none", help="{choices}.", column=True, dimension="recompute")
    recompute_modules: str = _field("core_attn", help="Selective recompute: modules re-run in the backward,"
                                    f" comma-separated, of {', '.join(RECOMPUTE_MODULES)}.")
    sequence_parallel: bool = _field(False, help="Shard layernorm and dropout activations over the TP group.",
                                     column=True, dimension="sequence_parallel")
    tp_overlap: bool = _field(False, help="Hide backward TP collectives behind weight-gradient GEMMs.")
    ep_overlap: bool = _field(False, help="Hide each expert all-to-all of a 1F1B forward and the next backward"
                              " behind the other's compute (Megatron-Core --overlap-moe-expert-parallel-comm).")
    p2p_blocking: bool = _field(False, help="Stages wait for their pipeline sends (Megatron-LM).", where=True)
    zero_stage: int = _field(0, help="ZeRO stage 0-3.", placed=True, column=True, dimension="zero_stage")
    shard_group_size: int | None = _field(None, help="Hybrid sharding with ZeRO-3: shard over groups of this many DP"
                                          " ranks, replicate across them (FSDP HYBRID_SHARD).", placed=True,
                                          column=True, dimension="zero_stage")
    optimizer: Optimizer = _field("adam", help="{choices}.")
    precision: Precision = _field("fp16", help="{choices}.")
    fp8_recipe: str = _field("delayed", help=f"With precision fp8, Transformer Engine's scaling recipe:"
                             f" {', '.join(FP8_RECIPES)}.")
    mode: Mode = _field("training", help="{choices}.")
    partition: PartitionKind = _field("balanced", help="balanced or uniform (see --stage-layers).",
                                      dimension="partition")
    stage_layers: tuple[int, ...] | None = _field(None, flag=False, dimension="partition")
    placement: str = _field("s-shape", help=f"Stage-to-device order: {', '.join(PLACEMENTS)} (explicit: see"
                            " --stage-devices).", placed=True, where=True, column=True, dimension="placement")
    stage_devices: tuple[tuple[int, ...], ...] | None = _field(None, placed=True, where=True, flag=False,
                                                              dimension="placement")
    group_layout: GroupLayout = _field("compact", help="TP groups {choices}.", placed=True, where=True, column=True,
                                       dimension="groups")
    group_order: GroupOrder = _field("tp-major", help="{choices} walk inside a stage.", placed=True, where=True,
                                     column=True, dimension="groups")
    wafer_stages: WaferStages = _field("span", help="On several wafers: span (stages cut from the order over all"
                                       " wafers) or within (walked wafer by wafer, no stage crossing a wafer"
                                       " boundary).", placed=True, where=True, column=True, dimension="placement")
    transfer_strategy: int = _field(1, help=f"Inter-stage transfer, PALM Fig. 11: {_spoken(TRANSFER_STRATEGIES)}.",
                                    where=True, dimension="transfer_strategy")
    math_fidelity: str | None = _field(None, help="Matrix-engine passes on hardware that has them:"
                                       f" {_spoken(MATH_FIDELITIES)} (default: the stated peak).")
    attention: Attention = _field("auto", help="Attention core: fused (FlashAttention, where the hardware states its"
                                  " efficiency), unfused, or auto (default: fused where stated).")
    prompt_length: int | None = _field(None, help="Inference: prompt tokens per sample (default: the model's sequence"
                                       " length).")
    decode_context_length: int = _field(0, help="Inference: simulate one decode step, each sample's new token"
                                        " attending to a KV cache of this many tokens (0: the prompt's forward).")
    attention_split: AttentionSplit = _field("heads", help="Inference: how a TP group divides attention: heads"
                                             " (Megatron) or users (sample x KV-head pairs, as tt-metal's decode"
                                             " over a core grid).", column=True, dimension="degrees")

    def __post_init__(self) -> None:
        _check(self)

    @property
    def recomputed_modules(self) -> frozenset[str]:
        """The modules a selective recompute re-runs (:attr:`recompute_modules`; empty under
        ``none`` or ``full``, whose full recompute re-runs the whole layer)."""
        return frozenset(self.recompute_modules.split(",")) if self.recompute == "selective" else frozenset()

    @property
    def num_devices(self) -> int:
        """Devices used: ``tp * cp * pp * dp``."""
        return self.tp * self.cp * self.pp * self.dp

    @property
    def devices_per_stage(self) -> int:
        """Devices of one pipeline stage: ``tp * cp * dp``."""
        return self.tp * self.cp * self.dp

    @property
    def weight_replicas(self) -> int:
        """Devices of a stage holding the same weights, over which gradients are reduced and
        ZeRO shards: ``dp * cp`` (Megatron-LM's data-parallel group with context parallelism)."""
        return self.dp * self.cp

    @property
    def expert_tp(self) -> int:
        """Ranks each routed expert's FFN is split over: :attr:`etp`, else ``tp``."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_replicas(self) -> int:
        """Devices of a stage holding the same experts, over which expert gradients are reduced
        and ZeRO shards expert states: ``tp * cp * dp / (ep * etp)`` (Megatron-Core's
        expert-data-parallel group; ``dp * cp / ep`` when ``etp`` is ``tp``)."""
        return self.devices_per_stage // (self.ep * self.expert_tp)

    @property
    def training(self) -> bool:
        """The workload has backward passes and a gradient update (not :func:`is_inference`);
        inference runs forward passes only (a prefill, a decode step, an encoder's or a CNN's
        forward)."""
        return not is_inference(self.mode)

    @property
    def decoding(self) -> bool:
        """One autoregressive decode step (``decode_context_length > 0``)."""
        return self.decode_context_length > 0

    @property
    def shards_optimizer_states(self) -> bool:
        """ZeRO stage 1 or more: optimizer states (with the fp32 master weights) sharded."""
        return self.zero_stage >= 1

    @property
    def shards_gradients(self) -> bool:
        """ZeRO stage 2 or more: gradients sharded too (reduce-scattered)."""
        return self.zero_stage >= 2

    @property
    def shards_weights(self) -> bool:
        """ZeRO stage 3: weights sharded too (gathered before use)."""
        return self.zero_stage == 3

    @property
    def zero_shards(self) -> int:
        """Ranks ZeRO shards over: :attr:`shard_group_size`, else ``dp * cp``."""
        return self.shard_group_size or self.weight_replicas

    @property
    def bytes_per_element(self) -> float:
        """Bytes of one element at :attr:`precision`."""
        return BYTES_PER_ELEMENT[self.precision]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-compatible dict; ``Strategy(**from_dict(d))`` round-trips it."""
        data = asdict(self)
        if self.stage_layers is not None:
            data["stage_layers"] = list(self.stage_layers)
        if self.stage_devices is not None:
            data["stage_devices"] = [list(d) for d in self.stage_devices]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Strategy:
        """Build from a dict (e.g. a TOML table or ``to_dict`` output).

        Raises:
            InputError: unknown key, or a field out of its domain.
        """
        try:
            return cls(**_fields(data))
        except TypeError as error:
            raise InputError(f"strategy: {error}") from None

    def with_fields(self, **fields: Any) -> Strategy:
        """This strategy with ``fields`` changed (lists as in :meth:`from_dict`), checked again.

        Raises:
            InputError: unknown key, or a field out of its domain.
        """
        return replace(self, **_fields(fields))


def _fields(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` as ``Strategy`` fields: known keys only, lists as the tuples it holds.

    Raises:
        InputError: an unknown key.
    """
    unknown = sorted(set(data) - set(Strategy.__dataclass_fields__))
    if unknown:
        raise InputError(f"strategy: unknown key {unknown[0]!r} (known: {sorted(Strategy.__dataclass_fields__)})")
    values = dict(data)
    if values.get("stage_layers") is not None:
        values["stage_layers"] = tuple(values["stage_layers"])
    if values.get("stage_devices") is not None:
        values["stage_devices"] = tuple(tuple(d) for d in values["stage_devices"])
    return values


def strategy_fields(**metadata: bool | str | None) -> tuple[str, ...]:
    """Names of the :class:`Strategy` fields whose metadata (see :func:`_field`: ``placed``,
    ``where``, ``column``, ``flag``, ``dimension``) has each given value, in declaration order."""
    return _selected(tuple(sorted(metadata.items())))


def _check(strategy: Strategy) -> None:
    """Raise :class:`InputError` on a field out of its range or fields that contradict each other."""
    for name in ("tp", "pp", "dp", "cp", "ep", "microbatch_size", "num_chunks"):
        _positive(name, getattr(strategy, name))
    _check_expert_degrees(strategy)
    if strategy.global_batch_size is not None:
        _positive("global_batch_size", strategy.global_batch_size)
        if strategy.global_batch_size > MAX_GLOBAL_BATCH_SIZE:
            raise InputError(f"strategy: `global_batch_size` must be at most {MAX_GLOBAL_BATCH_SIZE:,} samples (about"
                             f" 100x the largest published batches), got {strategy.global_batch_size}")
    if strategy.shard_group_size is not None:
        _positive("shard_group_size", strategy.shard_group_size)
        if not strategy.shards_weights or strategy.weight_replicas % strategy.shard_group_size:
            raise InputError(f"strategy: `shard_group_size` needs zero_stage 3 and to divide dp * cp ="
                             f" {strategy.weight_replicas}, got {strategy.shard_group_size} with zero_stage"
                             f" {strategy.zero_stage}")
    if strategy.ep > 1 and strategy.shards_weights:
        raise InputError(f"strategy: `ep` = {strategy.ep} with ZeRO-3 or hybrid sharding is not modelled (expert"
                         f" weights gathered over the expert-data-parallel group); use zero_stage <= 2")
    _choice("schedule", strategy.schedule, SCHEDULES)
    _choice("recompute", strategy.recompute, RECOMPUTES)
    _check_recompute_modules(strategy)
    _choice("optimizer", strategy.optimizer, OPTIMIZERS)
    _choice("precision", strategy.precision, PRECISIONS)
    _choice("fp8_recipe", strategy.fp8_recipe, FP8_RECIPES)
    if strategy.fp8_recipe != FP8_RECIPES[0] and strategy.precision != "fp8":
        raise InputError(f"strategy: `fp8_recipe` {strategy.fp8_recipe!r} needs precision 'fp8', got"
                         f" {strategy.precision!r}")
    _choice("mode", strategy.mode, MODES)
    _choice("partition", strategy.partition, PARTITIONS)
    _choice("placement", strategy.placement, PLACEMENTS)
    _choice("group_layout", strategy.group_layout, GROUP_LAYOUTS)
    _choice("group_order", strategy.group_order, GROUP_ORDERS)
    _choice("wafer_stages", strategy.wafer_stages, WAFER_STAGES)
    _choice("attention", strategy.attention, ATTENTIONS)
    _choice("attention_split", strategy.attention_split, ATTENTION_SPLITS)
    _choice("transfer_strategy", strategy.transfer_strategy, TRANSFER_STRATEGIES)
    _choice("zero_stage", strategy.zero_stage, ZERO_STAGES)
    _choice("math_fidelity", strategy.math_fidelity, (None, *MATH_FIDELITIES))
    for name in ("sequence_parallel", "tp_overlap", "ep_overlap", "p2p_blocking"):
        if not isinstance(getattr(strategy, name), bool):
            raise InputError(f"strategy: `{name}` must be true or false, got {getattr(strategy, name)!r}")
    if strategy.ep_overlap:
        _check_ep_overlap(strategy)
    if strategy.prompt_length is not None:
        _positive("prompt_length", strategy.prompt_length)
    if not isinstance(strategy.decode_context_length, int) or strategy.decode_context_length < 0:
        raise InputError(f"strategy: `decode_context_length` must be an integer >= 0, got"
                         f" {strategy.decode_context_length!r}")
    if strategy.training and (strategy.decode_context_length or strategy.prompt_length is not None
                          or strategy.attention_split != "heads"):
        raise InputError("strategy: `prompt_length`, `decode_context_length` and `attention_split` 'users' are"
                         " for mode 'inference'")
    if strategy.schedule != "interleaved-1f1b" and strategy.num_chunks != 1:
        raise InputError(
            f"strategy: `num_chunks` > 1 needs schedule 'interleaved-1f1b', got {strategy.num_chunks}"
            f" with {strategy.schedule!r}"
        )
    if (strategy.partition == "explicit") != (strategy.stage_layers is not None):
        raise InputError("strategy: `stage_layers` is given exactly when partition='explicit'")
    if (strategy.placement == "explicit") != (strategy.stage_devices is not None):
        raise InputError("strategy: `stage_devices` is given exactly when placement='explicit'")
    if strategy.placement == "explicit" and strategy.wafer_stages == "within":
        raise InputError("strategy: `wafer_stages` 'within' cuts stages from a named order; placement"
                         " 'explicit' gives every stage's devices")
    _check_explicit_lists(strategy)

def _check_expert_degrees(strategy: Strategy) -> None:
    """``ep`` and ``etp`` cut the stage's ranks evenly (see the class docstring)."""
    if strategy.etp is None:
        if strategy.weight_replicas % strategy.ep:
            raise InputError(f"strategy: `ep` must divide dp * cp = {strategy.dp}*{strategy.cp} ="
                             f" {strategy.weight_replicas}, got {strategy.ep}")
        return
    _positive("etp", strategy.etp)
    if strategy.etp not in (1, strategy.tp):
        raise InputError(f"strategy: `etp` must be 1 or tp = {strategy.tp} (other expert tensor-parallel"
                         f" degrees are not modelled), got {strategy.etp}")
    if strategy.devices_per_stage % (strategy.ep * strategy.etp):
        raise InputError(f"strategy: `ep` * `etp` = {strategy.ep}*{strategy.etp} must divide tp * cp * dp ="
                         f" {strategy.devices_per_stage}")

def _check_explicit_lists(strategy: Strategy) -> None:
    if strategy.stage_layers is not None:
        if len(strategy.stage_layers) != strategy.pp * strategy.num_chunks:
            raise InputError(
                f"strategy: `stage_layers` needs pp*num_chunks = {strategy.pp * strategy.num_chunks}"
                f" entries, got {len(strategy.stage_layers)}"
            )
        if any(not isinstance(n, int) or n < 0 for n in strategy.stage_layers):
            raise InputError(f"strategy: `stage_layers` must be integers >= 0, got {strategy.stage_layers}")
    if strategy.stage_devices is not None:
        if len(strategy.stage_devices) != strategy.pp:
            raise InputError(
                f"strategy: `stage_devices` needs pp = {strategy.pp} entries, got {len(strategy.stage_devices)}"
            )
        for stage, devices in enumerate(strategy.stage_devices):
            if len(devices) != strategy.devices_per_stage:
                raise InputError(
                    f"strategy: `stage_devices[{stage}]` needs tp*cp*dp = {strategy.devices_per_stage} ids,"
                    f" got {len(devices)}"
                )
        flat = [d for devices in strategy.stage_devices for d in devices]
        if len(set(flat)) != len(flat):
            raise InputError("strategy: `stage_devices` uses a device id twice")



def search_dimensions() -> dict[str, tuple[str, ...]]:
    """Each search dimension (:func:`_field` ``dimension``) with the fields it decides, both in
    declaration order: the one list behind :data:`spaces.DIMENSIONS`."""
    names = dict.fromkeys(f.metadata["dimension"] for f in fields(Strategy) if f.metadata["dimension"])
    return {name: strategy_fields(dimension=name) for name in names}


class StrategyFlag(NamedTuple):
    """A :class:`Strategy` field as a command-line flag (``palm-search simulate --name``)."""

    name: str
    """The field's name."""
    value_type: type
    """What the flag takes: ``int``, ``str`` or ``bool`` (a switch); None is the field's default."""
    help: str
    """The field's ``help`` metadata, a Literal field's values in place of ``{choices}``."""


@lru_cache(maxsize=1)
def strategy_flags() -> tuple[StrategyFlag, ...]:
    """The fields with a flag of their own (:func:`strategy_fields` ``flag=True``), in declaration
    order, each with its value type (read from its annotation, None dropped; a ``Literal``'s is its
    values' type) and help text: the one list a command line builds its strategy options from."""
    hints = get_type_hints(Strategy)
    return tuple(_flag(name, hints[name]) for name in strategy_fields(flag=True))


def _flag(name: str, annotation: Any) -> StrategyFlag:
    """One :class:`StrategyFlag` of field ``name`` annotated ``annotation`` (``X``, ``X | None``)."""
    optional = get_origin(annotation) in (Union, UnionType)
    (value_type,) = [a for a in get_args(annotation) if a is not type(None)] if optional else [annotation]
    choices = get_args(value_type) if get_origin(value_type) is Literal else ()
    if choices:
        (value_type,) = {type(choice) for choice in choices}
    if value_type not in (int, str, bool):
        raise TypeError(f"strategy field {name!r}: a flag takes int, str or bool, not {annotation}")
    help_text = str(Strategy.__dataclass_fields__[name].metadata["help"])
    return StrategyFlag(name, value_type, help_text.format(choices=_spoken(choices)))


@lru_cache(maxsize=64)
def _selected(metadata: tuple[tuple[str, bool | str | None], ...]) -> tuple[str, ...]:
    """:func:`strategy_fields` of sorted ``(key, value)`` pairs, found once (a screen asks per point)."""
    return tuple(f.name for f in fields(Strategy) if all(f.metadata[k] == v for k, v in metadata))


@lru_cache(maxsize=64)
def _unselected_defaults(metadata: tuple[tuple[str, bool | str | None], ...]) -> dict[str, Any]:
    """The defaults of the fields :func:`_selected` leaves out (a dict nobody changes)."""
    kept = set(_selected(metadata))
    return {f.name: f.default for f in fields(Strategy) if f.name not in kept}


def projection(strategy: Strategy, **metadata: bool | str | None) -> Strategy:
    """``strategy`` with every field not selected by ``metadata`` (:func:`strategy_fields`) at its
    default: a key for what reads only those fields (e.g. ``placed=True``: the placement). The
    last few are kept (an estimate projects each strategy twice: its replicas and its placement)."""
    return _projected(strategy, tuple(sorted(metadata.items())))


@lru_cache(maxsize=256)
def _projected(strategy: Strategy, metadata: tuple[tuple[str, bool | str | None], ...]) -> Strategy:
    return replace(strategy, **_unselected_defaults(metadata))
