"""From a model, a machine and a plan to the per-device costs of each virtual pipeline stage.

Units of work: a transformer is ``[embedding] + L layers + [logits]`` (embedding joins the first
virtual stage, logits the last); ResNet-50 is its 18 units (stem, 16 bottlenecks, head). Layers
are split into ``pp * num_chunks`` contiguous virtual stages in model order
(:mod:`simulator.workload.partition`); virtual stage ``j = c * pp + i`` is chunk ``c`` of
pipeline stage ``i`` (Megatron assigns chunks ``i, i + p, i + 2p, ...`` to device ``i``;
Narayanan et al. SC'21 §2.2.2).

Costing flows one way. Each unit is built and costed once: its operators and collectives
(:mod:`simulator.workload.operators`), served in the stack's formats
(:mod:`simulator.workload.formats`), its stashed activations (:mod:`simulator.workload.memory`),
then its roofline (:mod:`simulator.workload.roofline`, which takes the strategy's fields in a
:class:`~simulator.workload.roofline.Costing`). A stage then sums its units: its data-parallel
and ZeRO-3 collectives (here), its model states and update (:mod:`simulator.workload.memory`),
on a mesh its DRAM traffic (PALM Algorithm 1, :mod:`simulator.workload.sram`, or the tiled
dataflow, both taking :class:`~simulator.workload.sram.PlanFields`; ``dram_bytes = 0`` on a
cluster), and the update's time (:func:`~simulator.workload.roofline.optimizer_step`).
A stage's memory alone (:func:`build_stage_memory`, what a memory check needs) is the same
function on the same split of the same units, without the stage's times; units are kept across
plans by the strategy fields they read (:data:`STAGE_ONLY_FIELDS` aside).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from operator import attrgetter
from typing import TypeVar

from simulator.costs import Collective, CollectiveKind, MemoryBreakdown, PassCost, StageCost
from simulator.errors import InputError
from simulator.hardware.spec import Hardware
from simulator.legality import attention_of, check_workload, num_microbatches
from simulator.network.mesh import Mesh
from simulator.stacks.spec import MEGATRON_CORE, Stack
from simulator.strategy import FORMAT_BYTES, Strategy
from simulator.workload import formats, memory, operators, sram
from simulator.workload.operators import Operator, UnitCollectives
from simulator.workload.partition import balanced_partition, uniform_partition
from simulator.workload.roofline import Costing, UnitCost, cost_unit, idle_pass, optimizer_step
from simulator.workload.spec import ModelSpec
from simulator.workload.tiled_stage import plan_stage_tiled

Item = tuple[str, UnitCost]
"""A named unit of a stage (``layer3``, ``embedding``, ``stem``...)."""

Group = tuple[UnitCost, int]
"""A unit repeated ``count`` times on a stage."""

_Built = TypeVar("_Built")


def _recomputed(ops: tuple[Operator, ...], model: ModelSpec, strategy: Strategy, stack: Stack) -> tuple[Operator, ...]:
    """Operators re-run in a layer's backward under ``recompute``: all (full), under selective
    the stack's policy (:attr:`Stack.selective_recompute`) or the strategy's recompute modules
    (:data:`operators.RECOMPUTED_OPERATORS`), none.

    Raises:
        InputError: recompute modules other than the default under a stack with its own policy.
    """
    if strategy.recompute == "full":
        return ops
    if strategy.recompute == "selective" and stack.selective_recompute == "alternate_matmuls":
        if strategy.recompute_modules != "core_attn":
            raise InputError(f"strategy: `recompute_modules` = {strategy.recompute_modules!r} is Megatron-Core's;"
                             f" stack {stack.name!r} recomputes by its own policy ({stack.selective_recompute!r})")
        return operators.alternate_matmuls(ops, model, strategy)
    names = frozenset().union(*(operators.RECOMPUTED_OPERATORS[m] for m in strategy.recomputed_modules))
    return tuple(op for op in ops if op.name in names)


def _recompute_collectives(collectives: UnitCollectives, strategy: Strategy, stack: Stack) -> UnitCollectives:
    """A layer's collectives with those its stack's selective recompute re-runs: under
    ``alternate_matmuls`` the forward's all-gathers (torchtitan's ``_save_list`` saves
    ``reduce_scatter_tensor`` outputs, not the all-gathers that feed the recomputed ``wk`` and
    ``w3``)."""
    if strategy.recompute != "selective" or stack.selective_recompute != "alternate_matmuls":
        return collectives
    return replace(collectives, recompute=tuple(c for c in collectives.forward if c.kind == "all_gather"))


@dataclass(frozen=True, slots=True)
class Units:
    """A model's units, each costed once: the partitionable ``items``, the unit prepended to the
    first stage and the one appended to the last (a transformer's embedding and logits), and
    the KV cache of one microbatch each item holds (bytes; :func:`operators.kv_cache_bytes`)."""

    items: list[Item]
    first: UnitCost | None = None
    last: UnitCost | None = None
    kv_cache_bytes: tuple[float, ...] = ()


def _transformer_units(model: ModelSpec, hardware: Hardware, strategy: Strategy, tied_on_one_stage: bool,
                       stack: Stack) -> Units:
    """A transformer's units, costed one way: its operators and collectives
    (:mod:`~simulator.workload.operators`), served in the stack's formats (:func:`formats.serve`),
    their stashed activations (:mod:`~simulator.workload.memory`), then their roofline
    (:func:`cost_unit`, with the fields of the strategy it takes: :class:`Costing`); its layers
    alternate dense and Mixture-of-Experts, and full and windowed attention, as the model says
    (:func:`_layer_kind`)."""
    shard = hardware.memory.sram_dataflow() == "tiled"
    kv_format = stack.serving.kv_cache_format
    send = operators.boundary_bytes(model, strategy)
    traffic = stack.elementwise_bytes
    kinds = [_layer_kind(model, index) for index in range(model.num_layers)]
    raw_layers = {kind: operators.with_traffic(operators.transformer_layer(
        model, strategy, shard_elementwise=shard, moe=kind[0], window=kind[1]), model, strategy, traffic)
        for kind in dict.fromkeys(kinds)}
    raw_embed = operators.embedding(model, strategy, shard_elementwise=shard)
    raw_logits = operators.with_traffic(operators.logits(model, strategy, shard_elementwise=shard), model, strategy,
                                        traffic)
    collectives = {kind: _recompute_collectives(operators.layer_collectives(model, strategy, kind[0]), strategy,
                                                stack) for kind in raw_layers}
    embed_collectives = UnitCollectives(forward=operators.embedding_collectives(model, strategy))
    logits_collectives = UnitCollectives(forward=operators.logits_collectives(model, strategy))
    layers = {kind: (*formats.serve(ops, model, hardware, strategy, stack, kind[1]),
                     *formats.data_movement(strategy, stack)) for kind, ops in raw_layers.items()}
    embed_ops = formats.serve(raw_embed, model, hardware, strategy, stack)
    logits_ops = formats.serve(raw_logits, model, hardware, strategy, stack)
    activations = {kind: memory.layer_activation_bytes(model, strategy, kind[0], stack.selective_recompute)
                   for kind in layers}
    embed_activation = memory.embedding_activation_bytes(model, strategy)
    logits_activation = memory.logits_activation_bytes(model, strategy)
    costing = Costing.of(hardware, strategy)
    units = {kind: cost_unit(ops, recomputed=_recomputed(ops, model, strategy, stack), collectives=collectives[kind],
                             activation_bytes=activations[kind], send_bytes=send, overlap=strategy.tp_overlap,
                             costing=costing)
             for kind, ops in layers.items()}
    kv_cache = {kind: operators.kv_cache_bytes(model, strategy, FORMAT_BYTES[kv_format] if kv_format else None,
                                               window=kind[1]) for kind in units}
    embed = cost_unit(embed_ops, recomputed=(), collectives=embed_collectives, activation_bytes=embed_activation,
                      send_bytes=send, costing=costing)
    logits_parameters = operators.parameter_count(logits_ops, strategy.bytes_per_element)
    if tied_on_one_stage:
        logits_parameters -= operators.parameter_count(logits_ops[1:2], strategy.bytes_per_element)
    logits = cost_unit(logits_ops, recomputed=(), collectives=logits_collectives, activation_bytes=logits_activation,
                       send_bytes=send, parameters=logits_parameters, costing=costing)
    if tied_on_one_stage and logits.parameter_bytes:
        logits = replace(logits, parameter_bytes=logits.parameter_bytes - logits_ops[1].parameter_bytes)
    items = [(f"layer{index}", units[kind]) for index, kind in enumerate(kinds)]
    return Units(items, embed, logits, tuple(kv_cache[kind] for kind in kinds))


def _layer_kind(model: ModelSpec, index: int) -> tuple[bool, int]:
    """Layer ``index``'s kind: whether it is Mixture-of-Experts, and the window its attention
    keeps (0: none); each kind the model has is built once."""
    return model.is_moe_layer(index), model.attention_window(index)


def _resnet_activation(ops: tuple[Operator, ...], training: bool, recompute: str) -> float:
    """Stashed activations of a ResNet unit: every operator's output (full recompute: the input).

    Inference keeps the largest output in flight. Same accounting as Korthikanti §4 (store what
    the backward reads) applied to convolution, batch norm and ReLU outputs; a halo's buffer
    (:attr:`~simulator.workload.operators.Operator.l1_only`) is not stashed.
    """
    if not training:
        return max(op.output_bytes for op in ops)
    if recompute == "full":
        return ops[0].input_bytes
    return sum(op.output_bytes for op in ops if not op.l1_only)


def _resnet_units(model: ModelSpec, hardware: Hardware, strategy: Strategy) -> Units:
    """ResNet-50's units: its operators and collectives, then their roofline."""
    full = strategy.recompute == "full"
    tt_metal = hardware.memory.sram_dataflow() == "tiled"
    units = operators.resnet50_units(model, strategy, tt_metal=tt_metal)
    collectives = [operators.convolution_collectives(ops, strategy) for _, ops in units]
    costing = Costing.of(hardware, strategy)
    return Units([(name, cost_unit(
        ops, recomputed=ops if full else (),
        collectives=UnitCollectives(forward=forward, backward=backward, recompute=forward if full else ()),
        activation_bytes=_resnet_activation(ops, strategy.training, strategy.recompute),
        send_bytes=ops[-1].output_bytes, costing=costing))
        for (name, ops), (forward, backward) in zip(units, collectives, strict=True)])


STAGE_ONLY_FIELDS: tuple[str, ...] = ("pp", "dp", "global_batch_size", "schedule", "num_chunks", "zero_stage",
                                      "shard_group_size", "optimizer", "partition", "stage_layers")
"""Strategy fields a stage reads but none of its units (operators, collectives, stashed
activations, roofline): with those marked ``where``, left out of :func:`_units`' key (the number
of virtual stages enters it only as whether the embedding and logits share one)."""

_UNIT_FIELDS = tuple(f.name for f in fields(Strategy) if f.name not in STAGE_ONLY_FIELDS and not f.metadata["where"])


@dataclass(frozen=True, slots=True)
class VirtualStage:
    """The units of one virtual stage and what they hold whatever the plan around them.

    Attributes:
        entries: its units in model order (name, unit).
        groups: each distinct unit with its count, in first-seen order (:func:`_groups`).
        key: the units' identities and counts: stages of equal keys cost the same (names aside).
        parameters: parameters one device holds before ZeRO sharding (elements).
        expert_parameters: those of them in routed experts (elements).
        fp8_parameter_bytes: bytes of the parameters its FP8 GEMMs take (:attr:`Operator.fp8`).
        kv_cache_bytes: its layers' KV cache of one microbatch (bytes; :attr:`Units.kv_cache_bytes`).
    """

    entries: tuple[Item, ...]
    groups: tuple[Group, ...]
    key: tuple[tuple[int, int], ...]
    parameters: float
    expert_parameters: float
    fp8_parameter_bytes: float
    kv_cache_bytes: float

    @classmethod
    def of(cls, entries: Sequence[Item], alike: dict[tuple[int, ...], VirtualStage] | None = None,
           kv_cache_bytes: float = 0.0) -> VirtualStage:
        """The stage of ``entries``, whose layers' KV cache of one microbatch is
        ``kv_cache_bytes``; what it holds is taken from the stage in ``alike`` (by its units' ids
        in order, added there if new) whose units are the same (a split's stages of the same
        length)."""
        units = tuple(map(id, (unit for _, unit in entries)))
        same = None if alike is None else alike.get(units)
        if same is not None:
            return cls(entries=tuple(entries), groups=same.groups, key=same.key, parameters=same.parameters,
                       expert_parameters=same.expert_parameters, fp8_parameter_bytes=same.fp8_parameter_bytes,
                       kv_cache_bytes=same.kv_cache_bytes)
        groups = tuple(_groups(entries))
        stage = cls(entries=tuple(entries), groups=groups, key=tuple((id(unit), n) for unit, n in groups),
                    parameters=sum(unit.parameters * count for unit, count in groups),
                    expert_parameters=sum(unit.expert_parameters * count for unit, count in groups),
                    fp8_parameter_bytes=sum(op.parameter_bytes * count for unit, count in groups for op in unit.ops
                                            if op.fp8),
                    kv_cache_bytes=kv_cache_bytes)
        if alike is not None:
            alike[units] = stage
        return stage


@dataclass(frozen=True, slots=True)
class _KeptUnits:
    """A plan's units (with the model and machine they were built for, held so their ids stay
    theirs) and their splits into virtual stages found so far, by (partition, virtual stages,
    explicit layers)."""

    model: ModelSpec
    hardware: Hardware
    units: Units
    splits: dict[tuple[str, int, tuple[int, ...] | None], tuple[VirtualStage, ...]]


_UNITS: OrderedDict[tuple[object, ...], _KeptUnits] = OrderedDict()
_UNITS_KEPT = 2048
"""Units of the last plans, the oldest dropped first (about 16 KiB each for an MoE model): a
search and its memory pre-screen ask for the same units under many pipeline and data-parallel
degrees, schedules and ZeRO stages (Qwen3-30B-A3B on 1,024 H100s: 6,357 distinct units over
1,825 sets of degrees, each asked for again within the next 2,048 built)."""


def _units(model: ModelSpec, hardware: Hardware, strategy: Strategy, stack: Stack) -> _KeptUnits:
    """The model's units (a transformer's embedding and logits share a stage when the model ties
    them, as GPT's do, and the pipeline has a single virtual stage), kept for the last
    :data:`_UNITS_KEPT` plans (keyed by the model and machine objects, the stack and the
    strategy's fields a unit reads)."""
    tied = model.architecture != "llama" and not model.num_classes and strategy.pp * strategy.num_chunks == 1
    key = (id(model), id(hardware), stack, tied, *(getattr(strategy, name) for name in _UNIT_FIELDS))
    kept = _UNITS.get(key)
    if kept is None:
        kept = _UNITS[key] = _KeptUnits(model, hardware, _build_units(model, hardware, strategy, tied, stack), {})
        if len(_UNITS) > _UNITS_KEPT:
            _UNITS.popitem(last=False)
    return kept


def _build_units(model: ModelSpec, hardware: Hardware, strategy: Strategy, tied: bool, stack: Stack) -> Units:
    """The model's units, built (``tied``: the embedding and logits share a stage)."""
    if not model.is_transformer:
        return _resnet_units(model, hardware, strategy)
    return _transformer_units(model, hardware, strategy, tied, stack)


def _split(kept: _KeptUnits, strategy: Strategy) -> tuple[VirtualStage, ...]:
    """The units of each virtual stage in model order (the embedding on the first, the logits on
    the last), as the strategy's partition splits them; kept with the units."""
    key = (strategy.partition, strategy.pp * strategy.num_chunks, strategy.stage_layers)
    stages = kept.splits.get(key)
    if stages is None:
        items, first, last, cache = kept.units.items, kept.units.first, kept.units.last, kept.units.kv_cache_bytes
        counts = _partition(items, first, last, key[1], strategy.stage_layers, strategy.partition)
        starts = [sum(counts[:index]) for index in range(len(counts))]
        alike: dict[tuple[int, ...], VirtualStage] = {}
        stages = kept.splits[key] = tuple(VirtualStage.of(
            ([("embedding", first)] if first is not None and index == 0 else [])
            + items[start:start + count]
            + ([("logits", last)] if last is not None and index == len(counts) - 1 else []), alike,
            sum(cache[start:start + count]))
            for index, (start, count) in enumerate(zip(starts, counts, strict=True)))
    return stages


def _partition(items: list[Item], first: UnitCost | None, last: UnitCost | None, parts: int,
               stage_layers: tuple[int, ...] | None, partition: str) -> tuple[int, ...]:
    """Items per virtual stage (``parts`` of them): the explicit ``stage_layers``, or as the
    ``partition`` (``uniform`` or balanced) splits them."""
    if stage_layers is not None:
        return stage_layers
    if partition == "uniform":
        return uniform_partition(len(items), parts)
    costs = [unit.training_s for _, unit in items]
    costs[0] += first.training_s if first else 0.0
    costs[-1] += last.training_s if last else 0.0
    return _balanced_partition(tuple(costs), parts)


@lru_cache(maxsize=1024)
def _balanced_partition(costs: tuple[float, ...], parts: int) -> tuple[int, ...]:
    """:func:`balanced_partition`, kept: plans that share their units share their split."""
    return balanced_partition(costs, parts)


def _merge(collectives: Sequence[tuple[tuple[Collective, ...], int]]) -> tuple[Collective, ...]:
    """Sum the counts of identical (kind, size) collectives, keeping first-seen order."""
    counts: dict[tuple[CollectiveKind, float], int] = {}
    for group, repeat in collectives:
        for collective in group:
            key = (collective.kind, collective.size_bytes)
            counts[key] = counts.get(key, 0) + collective.count * repeat
    return tuple(Collective(kind=kind, size_bytes=size, count=count)
                 for (kind, size), count in counts.items())


def _groups(entries: Sequence[Item]) -> list[Group]:
    """Identical units of a stage with their counts (in first-seen order)."""
    counted: dict[int, Group] = {}  # by the unit's id, in first-seen order
    for _, unit in entries:
        seen = counted.get(id(unit))
        counted[id(unit)] = (unit, 1 if seen is None else seen[1] + 1)
    return list(counted.values())


def dp_collectives(parameters: float, strategy: Strategy, hardware: Hardware) -> tuple[Collective, ...]:
    """Data-parallel collectives of one iteration on one device (sizes in bytes).

    ZeRO 0: all-reduce of the gradients (``parameters x B``). ZeRO 1 and 2 (and 3 on a mesh):
    reduce-scatter of the gradients and all-gather of the updated weights, the same volume as an
    all-reduce (Rajbhandari et al. SC'20, §7.2.1). ZeRO 3 where devices hold their weights:
    its collectives run every microbatch (:func:`zero3_collectives`), and at the end of the
    iteration only hybrid sharding all-reduces its gradient shard over the replicas (MiCS,
    Zhang et al., VLDB'22, §3.3, "2-hop" synchronisation; the engine runs these over a stage's
    replica groups when it has them). Empty for ``dp * cp == 1`` and inference (context-parallel
    ranks hold the same weights).
    """
    if strategy.weight_replicas == 1 or not strategy.training:
        return ()
    size = parameters * strategy.bytes_per_element
    if _zero3_per_microbatch(strategy, hardware):
        replicas = strategy.weight_replicas // strategy.zero_shards
        return (Collective(kind="all_reduce", size_bytes=size / strategy.zero_shards),) if replicas > 1 else ()
    if not strategy.shards_optimizer_states:
        return (Collective(kind="all_reduce", size_bytes=size),)
    return (Collective(kind="reduce_scatter", size_bytes=size),
            Collective(kind="all_gather", size_bytes=size))


def _zero3_per_microbatch(strategy: Strategy, hardware: Hardware) -> bool:
    """ZeRO-3 gathers and reduces every microbatch where a device holds its weights in its own
    memory (a GPU's HBM). On a mesh every pass streams its weights from the shared off-chip DRAM
    anyway (the dataflow's DRAM traffic, and the tiled dataflow's multicast to the replicas),
    which is what ZeRO-3's gather moves there."""
    return strategy.shards_weights and strategy.weight_replicas > 1 and hardware.memory.sram_dataflow() is None


ZERO3_UNITS_IN_FLIGHT = 2
"""Gathered units a ZeRO-3 device holds at once: the one computing and the one prefetched
(PyTorch FSDP's rate limiter allows two all-gathers in flight, Zhao et al., VLDB'23, §4.4;
DeepSpeed prefetches the next submodule's parameters while one computes)."""


@dataclass(frozen=True, slots=True)
class Zero3Pass:
    """ZeRO-3's work in one pass of one microbatch on one device: collectives over the
    data-parallel group prefetched under the pass's compute (``hidden``) and run after it
    (``exposed``), and the host time of issuing them (``host_s``, s)."""

    hidden: tuple[Collective, ...] = ()
    exposed: tuple[Collective, ...] = ()
    host_s: float = 0.0


def zero3_tensors(groups: Sequence[Group], parameters: float, segments: int, strategy: Strategy,
                  stack: Stack) -> tuple[tuple[float, ...], ...]:
    """The bytes of each ZeRO-3 collective call of each unit of a stage, in model order: one
    call per unit (``layer``; every unit at the stage's mean, ``parameters / segments``) or
    one per parameter tensor of at least ``zero3_persistence_threshold`` elements (``parameter``;
    an operator's parameters are one tensor, its bias under the threshold)."""
    bpe = strategy.bytes_per_element
    if stack.zero3_gather == "layer":
        return ((parameters * bpe / segments,),) * segments
    return tuple(tuple(op.parameter_bytes for op in unit.ops
                       if op.parameter_bytes and op.parameter_bytes / bpe >= stack.zero3_persistence_threshold)
                 for unit, count in groups for _ in range(count))


def _regathered(units: int, strategy: Strategy, stack: Stack) -> slice:
    """The units gathered again in the backward (after the forward freed them): all
    (``always``), all but the last, whose backward comes first (``except_last``; none with
    pipeline parallelism, torchtitan's default policy), or none (``never``)."""
    if stack.reshard_after_forward == "always":
        return slice(0, units)
    if stack.reshard_after_forward == "except_last" and strategy.pp == 1:
        return slice(0, units - 1)
    return slice(0, 0)


def zero3_collectives(tensors: tuple[tuple[float, ...], ...], strategy: Strategy, hardware: Hardware,
                      backward: bool, stack: Stack = MEGATRON_CORE) -> Zero3Pass:
    """ZeRO-3's collectives over the data-parallel group in one pass of one microbatch (bytes),
    per unit of the stage (``tensors``: :func:`zero3_tensors`), as the frameworks wrap them
    (PyTorch FSDP, Zhao et al., VLDB'23, §3.2-3.4; DeepSpeed ZeRO-3, Rajbhandari et al., SC'20,
    §7.2.2: 3x the data-parallel volume):

    * forward: each unit's parameters all-gathered before it runs, the next one's prefetched
      while one computes; the first gather has nothing to hide under;
    * backward (recompute included: the gathered unit serves both): the units the forward
      freed (``stack.reshard_after_forward``) gathered again and every unit's gradients reduced
      (``stack.zero3_gradient_reduction``, in ``stack.zero3_reduction_format``) after it, both
      under the next unit's backward; the first gather (where the last unit was freed) and the
      last reduction are exposed.

    Without ``stack.overlap_data_parallel`` every call is exposed. Each call costs the stack's
    ``collective_call_overhead_s`` of host time (``host_s``), and each all-gather call
    ``stack.zero3_gather_rank_overhead_s`` more per rank of the sharding group. Empty unless ZeRO-3 runs per microbatch
    (:func:`_zero3_per_microbatch`).
    """
    if (not strategy.training and backward) or not _zero3_per_microbatch(strategy, hardware):
        return Zero3Pass()
    regathered = tensors[_regathered(len(tensors), strategy, stack)] if backward else tensors
    exposed_gather = not backward or stack.reshard_after_forward == "always"
    calls: list[tuple[CollectiveKind, tuple[float, ...], int | None]] = [
        ("all_gather", tuple(b for unit in regathered for b in unit), 0 if exposed_gather else None)]
    if backward:
        scale = FORMAT_BYTES[stack.zero3_reduction_format] / strategy.bytes_per_element \
            if stack.zero3_reduction_format else 1.0
        calls.append((stack.zero3_gradient_reduction, tuple(b * scale for unit in tensors for b in unit), -1))
    hidden: list[tuple[tuple[Collective, ...], int]] = []
    exposed: list[tuple[tuple[Collective, ...], int]] = []
    for kind, sizes, first in calls:
        if not stack.overlap_data_parallel:
            exposed.append((_calls(kind, sizes), 1))
        elif first is None:
            hidden.append((_calls(kind, sizes), 1))
        elif sizes:
            rest = list(sizes)
            del rest[first]
            hidden.append((_calls(kind, tuple(rest)), 1))
            exposed.append((_calls(kind, (sizes[first],)), 1))
    count = sum(len(sizes) for _, sizes, _ in calls)
    ranks = len(calls[0][1]) * strategy.zero_shards
    host_s = count * stack.collective_call_overhead_s + ranks * stack.zero3_gather_rank_overhead_s
    return Zero3Pass(hidden=_merge(hidden), exposed=_merge(exposed), host_s=host_s)


def _calls(kind: CollectiveKind, sizes: tuple[float, ...]) -> tuple[Collective, ...]:
    """One collective of ``kind`` per size (bytes), identical ones counted together."""
    counts: dict[float, int] = {}
    for size in sizes:
        counts[size] = counts.get(size, 0) + 1
    return tuple(Collective(kind=kind, size_bytes=size, count=n) for size, n in counts.items())


def zero3_buffer_bytes(stage_parameters: float, unit_parameters: float, strategy: Strategy, hardware: Hardware,
                       stack: Stack = MEGATRON_CORE) -> float:
    """Memory ZeRO-3 takes beyond its shards on one device (bytes): :data:`ZERO3_UNITS_IN_FLIGHT`
    gathered units (at the largest unit's ``unit_parameters``), or the whole stage's
    ``stage_parameters`` where the backward gathers nothing again (:func:`_regathered`), and one
    unit's unsharded gradients awaiting their reduction; 0 unless ZeRO-3 runs per microbatch.
    Parameters that persist whole on every device (``zero3_persistence_threshold``) are not
    counted: biases and norms, under 0.1% of a layer of hidden 4096 and above."""
    if not _zero3_per_microbatch(strategy, hardware):
        return 0.0
    units = ZERO3_UNITS_IN_FLIGHT + (1 if strategy.training else 0)
    if strategy.training and _regathered(2, strategy, stack) == slice(0, 0):
        held = max(ZERO3_UNITS_IN_FLIGHT * unit_parameters, stage_parameters)
        return (held + unit_parameters) * strategy.bytes_per_element
    return units * unit_parameters * strategy.bytes_per_element


PLANNERS = {"palm-algorithm-1": sram.plan_stage, "tiled": plan_stage_tiled}
"""A mesh's dataflow -> the planner of a stage's DRAM traffic."""


def _sram_plan(groups: Sequence[Group], hardware: Hardware, fields: sram.PlanFields) -> sram.SramPlan | None:
    """The stage's DRAM traffic as the mesh's dataflow moves it (None off meshes)."""
    dataflow = hardware.memory.sram_dataflow()
    if dataflow is None:
        return None
    return PLANNERS[dataflow]([(unit.ops, count) for unit, count in groups], hardware.memory.sram.capacity_bytes,
                              fields, [(unit.recomputed, count) for unit, count in groups if unit.recomputed])


def _replicas_per_chip(hardware: Hardware, strategy: Strategy) -> int | None:
    """:func:`simulator.workload.sram.replicas_per_chip` on a mesh of chips joined by tt-metal's
    collective library (``die_collectives = "hierarchical"``: each chip's replicas read the copy
    its own DRAM holds); None elsewhere: one fabric (a single chip, a wafer's dies, PALM's flat
    collectives) multicasts a weight read once to every replica of the stage."""
    network = hardware.network
    if not isinstance(network, Mesh) or network.die_collectives != "hierarchical":
        return None
    return sram.replicas_per_chip(strategy, network.cores_x * network.cores_y)


def _multicast(size_bytes: float) -> tuple[tuple[Collective, ...], int]:
    """Operands a group multicasts in a pass, as an all-gather of their bytes over the group
    (:mod:`simulator.workload.tiled_stage`), in :func:`_merge`'s form."""
    return ((Collective(kind="all_gather", size_bytes=size_bytes),), 1) if size_bytes else ((), 1)


def _forward(groups: Sequence[Group], plan: sram.SramPlan | None, segments: int, zero3: Zero3Pass) -> PassCost:
    """Forward pass of a stage per microbatch: its units' sums (with ZeRO-3's host time);
    multicast and ZeRO-3's prefetched gathers run under its compute."""
    compute_s = sum(unit.forward_s * count for unit, count in groups) + zero3.host_s
    launch_s = sum(unit.forward_launch_s * count for unit, count in groups) if plan else 0.0
    compute_s -= launch_s
    multicast = plan.forward_multicast_bytes if plan else 0.0
    replicas = plan.forward_replica_bytes if plan else 0.0
    return PassCost(
        compute_s=compute_s, launch_s=launch_s,
        dram_bytes=plan.forward_dram_bytes if plan else 0.0,
        tp_collectives=_merge([(unit.forward_collectives, count) for unit, count in groups]),
        segments=segments, flops=sum(unit.forward_flops * count for unit, count in groups),
        overlapped_collectives=_merge([_multicast(multicast)]),
        replica_collectives=_merge([_multicast(replicas), (zero3.hidden, 1)]), exposed_dp_collectives=zero3.exposed,
        cp_collectives=_merge([(unit.context_forward, count) for unit, count in groups]),
        cp_overlap_s=sum(unit.attention_forward_s * count for unit, count in groups),
        ep_collectives=_merge([(unit.expert_forward, count) for unit, count in groups]),
        overlap_s=compute_s if multicast or replicas else 0.0)


def _backward(groups: Sequence[Group], plan: sram.SramPlan | None, segments: int, training: bool,
              zero3: Zero3Pass) -> PassCost:
    """Backward pass of a stage per microbatch (recompute included; idle for inference). The TP
    collectives of ``tp_overlap`` run under the weight-gradient GEMMs; with multicast, both run
    under the whole pass, as ZeRO-3's prefetched collectives do; its exposed ones follow the pass."""
    if not training:
        return idle_pass(segments)
    compute_s = sum(unit.backward_s * count for unit, count in groups) + zero3.host_s
    launch_s = sum(unit.backward_launch_s * count for unit, count in groups) if plan else 0.0
    compute_s -= launch_s
    multicast = plan.backward_multicast_bytes if plan else 0.0
    replicas = plan.backward_replica_bytes if plan else 0.0
    overlapped = [(unit.overlapped_collectives, count) for unit, count in groups]
    return PassCost(
        compute_s=compute_s, launch_s=launch_s,
        dram_bytes=plan.backward_dram_bytes if plan else 0.0,
        tp_collectives=_merge([(unit.backward_collectives, count) for unit, count in groups]),
        segments=segments, flops=sum(unit.backward_flops * count for unit, count in groups),
        recompute_s=sum(unit.recompute_s * count for unit, count in groups),
        overlapped_collectives=_merge([*overlapped, _multicast(multicast)]),
        replica_collectives=_merge([_multicast(replicas), (zero3.hidden, 1)]), exposed_dp_collectives=zero3.exposed,
        cp_collectives=_merge([(unit.context_backward, count) for unit, count in groups]),
        cp_overlap_s=sum(unit.attention_backward_s * count for unit, count in groups),
        ep_collectives=_merge([(unit.expert_backward, count) for unit, count in groups]),
        overlap_s=compute_s if multicast or replicas else sum(unit.overlap_s * count for unit, count in groups))


def _live_activation_bytes(groups: Sequence[Group], training: bool) -> float:
    """Activations one microbatch holds on the stage at its peak (bytes): every unit's stash in
    training (each waits for its backward); in inference only the largest unit's output, the
    one alive while the next unit runs (nothing waits for a backward)."""
    if not training:
        return max(unit.activation_bytes for unit, _ in groups)
    return sum(unit.activation_bytes * count for unit, count in groups)


def _split_backward(backward: PassCost, groups: Sequence[Group], multicast: bool) -> tuple[PassCost, PassCost]:
    """The input-gradient (B) and weight-gradient (W) halves of ``backward`` (Qi et al., "Zero
    Bubble Pipeline Parallelism", ICLR'24 §2): W is the weight-gradient GEMMs
    (:attr:`UnitCost.weight_gradient_s`), B the rest, recompute included. Their compute and
    flops sum to the backward's; DRAM traffic is shared in proportion to compute (an
    approximation: the planner costs the backward as one pass). B keeps every collective but
    ZeRO-3's exposed reduce-scatter, which waits for the weight gradients: with a multicast (or
    replicas) they hide under B's own compute, while ``tp_overlap``'s all-reduces, which hid under
    the weight-gradient GEMMs, are exposed in B."""
    weight_s = sum(unit.weight_gradient_s * count for unit, count in groups)
    weight_flops = sum(unit.weight_gradient_flops * count for unit, count in groups)
    share = weight_s / backward.compute_s if backward.compute_s else 0.0
    input_s = backward.compute_s - weight_s
    gradients = tuple(c for c in backward.exposed_dp_collectives if c.kind != "all_gather")
    backward_input = replace(
        backward, compute_s=input_s, dram_bytes=backward.dram_bytes * (1.0 - share),
        flops=backward.flops - weight_flops, overlap_s=input_s if multicast else 0.0,
        exposed_dp_collectives=tuple(c for c in backward.exposed_dp_collectives if c not in gradients))
    backward_weight = PassCost(compute_s=weight_s, dram_bytes=backward.dram_bytes * share, tp_collectives=(),
                               segments=backward.segments, flops=weight_flops, exposed_dp_collectives=gradients)
    return backward_input, backward_weight


def expert_dp_collectives(experts: float, strategy: Strategy) -> tuple[Collective, ...]:
    """Data-parallel collectives of a device's ``experts`` routed-expert parameters over the
    ``tp dp cp / (ep etp)`` ranks holding the same experts (Megatron-Core's expert-data-parallel group):
    an all-reduce of their gradients, or with ZeRO 1-2 a reduce-scatter and an all-gather of
    the same volume (:func:`dp_collectives`). Empty without experts, for inference, or when
    each expert has one replica."""
    if not experts or not strategy.training or strategy.expert_replicas == 1:
        return ()
    size = experts * strategy.bytes_per_element
    if strategy.shards_optimizer_states:
        return (Collective(kind="reduce_scatter", size_bytes=size), Collective(kind="all_gather", size_bytes=size))
    return (Collective(kind="all_reduce", size_bytes=size),)


def _stage_memory(stage: VirtualStage, hardware: Hardware, strategy: Strategy, stack: Stack,
                  cache_copies: int, sram_resident_bytes: float = 0.0) -> MemoryBreakdown:
    """Memory of one device of a virtual stage, from its units' parameters and stashes alone
    (no time): its model states under ZeRO (:func:`memory.stage_state_bytes`, weights in a
    serving stack's formats where it stores some), FP8 weight copies, ZeRO-3's gathered buffers
    (:func:`zero3_buffer_bytes`), live activations of one microbatch and the KV cache of its
    layers (:attr:`VirtualStage.kv_cache_bytes` for each of ``cache_copies``, the replica's
    microbatches). ``sram_resident_bytes``: what a mesh's planner keeps in SRAM
    (reported, not part of the capacity check)."""
    groups, parameters = stage.groups, stage.parameters
    fp8_parameters = stage.fp8_parameter_bytes / strategy.bytes_per_element
    buffers = zero3_buffer_bytes(parameters, max(unit.parameters for unit, _ in groups), strategy, hardware, stack)
    states = memory.stage_state_bytes(parameters, stage.expert_parameters, strategy)
    weights = states.weights_bytes
    if any(unit.parameter_bytes for unit, _ in groups):
        weights = sum((unit.parameter_bytes or unit.parameters * strategy.bytes_per_element) * count
                      for unit, count in groups) / (strategy.zero_shards if strategy.shards_weights else 1)
    return MemoryBreakdown(
        weights_bytes=weights + memory.fp8_weight_copy_bytes(fp8_parameters, strategy) + buffers,
        gradients_bytes=states.gradients_bytes,
        optimizer_bytes=states.optimizer_bytes,
        activation_bytes_per_microbatch=_live_activation_bytes(groups, strategy.training),
        sram_resident_bytes=sram_resident_bytes,
        kv_cache_bytes=stage.kv_cache_bytes * cache_copies)


def _stage_cost(stage: VirtualStage, hardware: Hardware, strategy: Strategy, stack: Stack,
                cache_copies: int) -> StageCost:
    """Cost of one virtual stage, one way: its data-parallel and ZeRO-3 collectives (here), its
    memory (:func:`_stage_memory`), its update (:mod:`~simulator.workload.memory`), its DRAM
    traffic (the mesh's planner), the update's time (:func:`optimizer_step`), then its passes."""
    entries, groups, segments = stage.entries, stage.groups, len(stage.entries)
    parameters, experts = stage.parameters, stage.expert_parameters
    gemm_flops = sum(unit.gemm_flops * count for unit, count in groups)
    tensors = zero3_tensors(groups, parameters, segments, strategy, stack)
    zero3_backward = zero3_collectives(tensors, strategy, hardware, True, stack)
    zero3_forward = zero3_collectives(tensors, strategy, hardware, False, stack)
    data_parallel = dp_collectives(parameters - experts, strategy, hardware)
    expert_data_parallel = expert_dp_collectives(experts, strategy)
    updated = memory.updated_parameters(parameters, experts, strategy)
    update_bytes = memory.optimizer_step_bytes_per_parameter(strategy)
    plan = _sram_plan(groups, hardware, sram.PlanFields.of(strategy, _replicas_per_chip(hardware, strategy)))
    step = optimizer_step(updated, update_bytes, strategy.optimizer, plan.update_dram_bytes if plan else 0.0,
                          segments, hardware) if strategy.training else idle_pass(segments)
    forward = _forward(groups, plan, segments, zero3_forward)
    backward = _backward(groups, plan, segments, strategy.training, zero3_backward)
    multicast = bool(plan and (plan.backward_multicast_bytes or plan.backward_replica_bytes))
    backward_input, backward_weight = _split_backward(backward, groups, multicast)
    if strategy.ep_overlap:  # the 1F1B phase's merged pairs: each hides its all-to-alls under the other
        forward, backward = (replace(forward, ep_overlap_s=backward.compute_s),
                             replace(backward, ep_overlap_s=forward.compute_s))
    return StageCost(
        units=tuple(name for name, _ in entries),
        forward=forward,
        backward=backward, backward_input=backward_input, backward_weight=backward_weight,
        optimizer_step=step,
        activation_send_bytes=entries[-1][1].send_bytes,
        gradient_send_bytes=entries[0][1].send_bytes if strategy.training else 0.0,
        dp_collectives=data_parallel, parameters=parameters,
        expert_dp_collectives=expert_data_parallel,
        model_flops_per_microbatch=gemm_flops * (3.0 if strategy.training else 1.0),
        hardware_flops_per_microbatch=gemm_flops * (3.0 if strategy.training else 1.0)
        + sum(unit.recompute_gemm_flops * count for unit, count in groups),
        memory=_stage_memory(stage, hardware, strategy, stack, cache_copies,
                             plan.resident_bytes if plan else 0.0),
    )


def build_stage_costs(model: ModelSpec, hardware: Hardware, strategy: Strategy,
                      stack: Stack = MEGATRON_CORE) -> tuple[StageCost, ...]:
    """Per-device costs of each virtual pipeline stage, indexed by virtual stage ``c * pp + i``.

    Args:
        model: the model's shapes.
        hardware: the machine (``mesh`` uses PALM Algorithm 1 for DRAM traffic; ``cluster``
            counts HBM traffic inside the compute time).
        strategy: the plan (tp, pp, num_chunks, microbatch, recompute, ZeRO, partition, ...).
        stack: the software running it (how ZeRO-3's collectives are issued; default Megatron-Core).

    Returns:
        ``pp * num_chunks`` :class:`StageCost` in model order.

    Raises:
        InputError: tp does not divide heads / hidden / FFN (or ResNet channels), sequence
            parallelism with tp not dividing the sequence, more virtual stages than layers,
            explicit ``stage_layers`` not summing to the layers or with an empty stage,
            microbatch larger than the global batch, or no peak for the precision.
    """
    strategy, stages, copies = _virtual_stages(model, hardware, strategy, stack)
    costs = [replace(cost, units=tuple(name for name, _ in stage.entries)) for cost, stage in zip(
        _once_per_stage(stages, lambda stage: _stage_cost(stage, hardware, strategy, stack, copies)),
        stages, strict=True)]
    host_s = formats.host_sampling_s(model, strategy, stack)
    if host_s:  # the last stage's logits go to the host, the device waiting
        costs[-1] = replace(costs[-1], forward=replace(costs[-1].forward, host_s=host_s))
    return tuple(costs)


def build_stage_memory(model: ModelSpec, hardware: Hardware, strategy: Strategy,
                       stack: Stack = MEGATRON_CORE) -> tuple[MemoryBreakdown, ...]:
    """The :attr:`StageCost.memory` of each virtual pipeline stage that :func:`build_stage_costs`
    gives (the same function, :func:`_stage_memory`, on the same split), without the stages'
    passes, collectives and DRAM plans: what a memory check needs (``sram_resident_bytes`` is
    0: no mesh planner runs). Kept for the last plans (:func:`_memory_split`): plans that
    differ only in their schedule share it, and in their ZeRO sharding share the split.

    Raises:
        InputError: as :func:`build_stage_costs`.
    """
    kept = _memory_split(model, hardware, strategy, stack)
    sharding = (strategy.zero_stage, strategy.shard_group_size)
    memory = kept.memory.get(sharding)
    if memory is None:  # the plan's own strategy: a stage's memory reads no attention (resolved for the split)
        memory = kept.memory[sharding] = tuple(_once_per_stage(
            kept.stages, lambda stage: _stage_memory(stage, hardware, strategy, stack, kept.cache_copies)))
    return memory


SPLIT_FREE_FIELDS = ("schedule", "zero_stage", "shard_group_size")
"""Strategy fields neither the rules of a stage split (:func:`check_workload`), its attention
(:func:`attention_of`), its units nor the split itself read (the schedule enters only as its
number of chunks): plans differing only in them share a split (:func:`_memory_split`), and
only in the schedule their memory (:func:`_stage_memory` reads the ZeRO sharding)."""

_SPLIT_KEY = attrgetter(*(f.name for f in fields(Strategy) if f.name not in SPLIT_FREE_FIELDS))


@dataclass(frozen=True, slots=True)
class _KeptSplit:
    """A plan's virtual stages and KV-cache copies (:func:`_virtual_stages`), with the model
    and machine they were built for (held so their ids stay theirs), and each ZeRO sharding's
    memory of them, by (ZeRO stage, shard group size)."""

    model: ModelSpec
    hardware: Hardware
    stages: tuple[VirtualStage, ...]
    cache_copies: int
    memory: dict[tuple[int, int | None], tuple[MemoryBreakdown, ...]]


_SPLITS: OrderedDict[tuple[object, ...], _KeptSplit] = OrderedDict()
_SPLITS_KEPT = 1024
"""Splits of the last plans, the oldest dropped first: a memory pre-screen checks each set of
degrees' plans together (Qwen3-30B-A3B on 1,024 H100s: 109,285 checks of 1,825 sets of
degrees, 3 in 10 needing a split of their own, 1 in 2 a memory of its own)."""


def _memory_split(model: ModelSpec, hardware: Hardware, strategy: Strategy, stack: Stack) -> _KeptSplit:
    """:func:`_virtual_stages` of ``strategy``, kept for the last :data:`_SPLITS_KEPT` plans by
    the model and machine objects, the stack and the strategy but its :data:`SPLIT_FREE_FIELDS`.

    Raises:
        InputError: as :func:`build_stage_costs`.
    """
    key = (id(model), id(hardware), stack, _SPLIT_KEY(strategy))
    kept = _SPLITS.get(key)
    if kept is None:
        _, stages, copies = _virtual_stages(model, hardware, strategy, stack)
        kept = _SPLITS[key] = _KeptSplit(model, hardware, stages, copies, {})
        if len(_SPLITS) > _SPLITS_KEPT:
            _SPLITS.popitem(last=False)
    return kept


def _once_per_stage(stages: Sequence[VirtualStage], build: Callable[[VirtualStage], _Built]) -> list[_Built]:
    """``build`` of each virtual stage, run once per distinct stage (:attr:`VirtualStage.key`)."""
    built: dict[tuple[tuple[int, int], ...], _Built] = {}
    for stage in stages:
        if stage.key not in built:
            built[stage.key] = build(stage)
    return [built[stage.key] for stage in stages]


def _virtual_stages(model: ModelSpec, hardware: Hardware, strategy: Strategy,
                    stack: Stack) -> tuple[Strategy, tuple[VirtualStage, ...], int]:
    """The checked strategy (its attention resolved), its virtual stages in model order
    (:func:`_split`), and the copies of each stage's KV cache of one microbatch its devices
    hold: one per microbatch of the replica, as each user's cache stays resident between steps
    (:attr:`VirtualStage.kv_cache_bytes`, in the stack's KV-cache format where it gives one).

    Raises:
        InputError: as :func:`build_stage_costs`.
    """
    check_workload(model, hardware, strategy)
    attention = attention_of(model, hardware, strategy)
    if attention != strategy.attention:
        strategy = replace(strategy, attention=attention)  # type: ignore[arg-type]
    kept = _units(model, hardware, strategy, stack)
    return strategy, _split(kept, strategy), num_microbatches(model, strategy)


def model_flops_per_iteration(model: ModelSpec, global_batch_size: int, *, recompute: bool = False) -> float:
    """Model flop of one training iteration (Narayanan et al. SC'21, Eq. 3 and its derivation §5.1).

    Without recompute ``72 B s l h^2 (1 + s/(6h) + V/(12 l h))``; with the recompute forward
    (their Eq. 3 as printed) ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``. Assumes ``f = 4h``
    (GPT); ResNet-50 sums 3x its forward GEMM flop per sample.
    """
    if not model.is_transformer:
        one = Strategy(microbatch_size=1)
        units = operators.resnet50_units(model, one)
        return 3.0 * global_batch_size * sum(op.flops for _, ops in units for op in ops if op.kind == "gemm")
    batch, s, layers, h = global_batch_size, model.sequence_length, model.num_layers, model.hidden_size
    vocab = 0 if model.num_classes else model.vocab_size  # a classification head: 2 b h (h + C), under 0.1%
    if recompute:
        return 96.0 * batch * s * layers * h * h * (1.0 + s / (6.0 * h) + vocab / (16.0 * layers * h))
    return 72.0 * batch * s * layers * h * h * (1.0 + s / (6.0 * h) + vocab / (12.0 * layers * h))
