"""From a model, a machine and a plan to the per-device costs of each virtual pipeline stage.

Units of work: a transformer is ``[embedding] + L layers + [logits]`` (embedding joins the first
virtual stage, logits the last); ResNet-50 is its 18 units (stem, 16 bottlenecks, head). Layers
are split into ``pp * num_chunks`` contiguous virtual stages in model order; virtual stage
``j = c * pp + i`` is chunk ``c`` of pipeline stage ``i`` (Megatron assigns chunks
``i, i + p, i + 2p, ...`` to device ``i``; Narayanan et al. SC'21 §2.2.2).

Operator time is a roofline (Williams et al., CACM 2009) with the hardware's calibration:
``max(flops / (peak * gemm_efficiency), bytes / (bandwidth * memory_bound_efficiency))
+ kernel_overhead_s``, where ``bytes = input + weight + output`` and the bandwidth is the SRAM's
on a mesh (DRAM traffic goes separately to the engine, from PALM Algorithm 1 in
:mod:`simulator.workload.sram`) and the HBM's on a cluster (``dram_bytes = 0``).
The backward of an operator is ``2x`` its forward flops and bytes (data and weight gradients;
Narayanan et al. SC'21 §5.1) and two kernels for a GEMM; with ``tp_overlap`` a layer's backward
TP collectives run under its weight-gradient GEMMs (Korthikanti et al., MLSys'23, §6.2).
Recompute adds a forward (full) or the attention core (selective) to the backward (same source).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from simulator.costs import Collective, MemoryBreakdown, PassCost, StageCost
from simulator.errors import InputError
from simulator.hardware.spec import Hardware
from simulator.legality import check_workload
from simulator.strategy import Strategy
from simulator.workload import memory, operators, sram
from simulator.workload.operators import Operator
from simulator.workload.spec import ModelSpec

ADAM_FLOP_PER_PARAMETER = 10.0
"""Adam update arithmetic per parameter: moments 3 + 4, step 3 (Kingma & Ba 2015, Alg. 1)."""

SGD_FLOP_PER_PARAMETER = 2.0
"""SGD update arithmetic per parameter: scale and subtract."""

@dataclass(frozen=True, slots=True, kw_only=True)
class _Unit:
    """One unit's operators and per-microbatch costs on one device (internal)."""

    ops: tuple[Operator, ...]
    recomputed: tuple[Operator, ...]
    forward_collectives: tuple[Collective, ...]
    backward_collectives: tuple[Collective, ...]
    overlapped_collectives: tuple[Collective, ...]
    overlap_s: float
    forward_s: float
    backward_s: float
    recompute_s: float
    forward_flops: float
    backward_flops: float
    gemm_flops: float
    parameters: float
    activation_bytes: float
    send_bytes: float

    @property
    def training_s(self) -> float:
        """Forward + backward compute time (s), the balanced partition's measure."""
        return self.forward_s + self.backward_s


def _peak(hardware: Hardware, strategy: Strategy) -> float:
    try:
        return hardware.peak_flop_per_s[strategy.precision]
    except KeyError:
        raise InputError(
            f"hardware {hardware.name!r} has no peak for precision {strategy.precision!r}"
            f" (has {sorted(hardware.peak_flop_per_s)})"
        ) from None


def _bandwidth(hardware: Hardware) -> float:
    """On-chip operand bandwidth: SRAM on a mesh, HBM on a cluster (bytes/s)."""
    return hardware.operand_bandwidth_bytes_per_s


def _op_time(op: Operator, factor: float, kernels: int, hardware: Hardware, peak: float) -> float:
    """Roofline time of ``factor`` x the operator's flops and bytes, plus ``kernels`` launches (s).

    On a GPU a GEMM also loses its tile and wave quantization
    (:meth:`~simulator.network.cluster.Cluster.gemm_efficiency`); its backward GEMMs are
    charged the forward's quantization (their shapes are the forward's transposed pairs).
    """
    cal = hardware.calibration
    moved = factor * (op.input_bytes + op.weight_bytes + op.output_bytes)
    efficiency = cal.gemm_efficiency
    if op.kind == "gemm":
        efficiency *= hardware.network.gemm_efficiency(op.rows, op.columns)
    compute = factor * op.flops / (peak * efficiency)
    memory_s = moved / (_bandwidth(hardware) * cal.memory_bound_efficiency)
    return max(compute, memory_s) + kernels * cal.kernel_overhead_s


def _pass_times(ops: Sequence[Operator], hardware: Hardware, peak: float) -> tuple[float, float]:
    """(forward, backward without recompute) time of ``ops`` (s)."""
    forward = sum(_op_time(op, 1.0, 1, hardware, peak) for op in ops)
    backward = sum(_op_time(op, 2.0, 2 if op.kind == "gemm" else 1, hardware, peak) for op in ops)
    return forward, backward


def _weight_gradient_s(ops: Sequence[Operator], hardware: Hardware, peak: float) -> float:
    """Time of the weight-gradient GEMMs of ``ops`` (one per weighted GEMM, its forward's
    flops), the compute Megatron-LM runs under the input-gradient all-reduce (s)."""
    return sum(_op_time(op, 1.0, 1, hardware, peak) for op in ops if op.kind == "gemm" and op.weight_bytes)


def _unit(ops: tuple[Operator, ...], recomputed: tuple[Operator, ...],
          collectives: tuple[tuple, tuple, tuple], activation_bytes: float, send_bytes: float,
          parameters: float | None, hardware: Hardware, strategy: Strategy, overlap: bool = False) -> _Unit:
    """Cost one unit; ``collectives`` = (forward, backward, recompute) TP collectives. With
    ``overlap`` the backward collectives run under the weight-gradient GEMMs (``tp_overlap``)."""
    peak = _peak(hardware, strategy)
    forward_s, backward_s = _pass_times(ops, hardware, peak)
    recompute_s = _pass_times(recomputed, hardware, peak)[0]
    training = strategy.mode == "training"
    flops = sum(op.flops for op in ops)
    forward_collectives, backward_collectives, recompute_collectives = collectives
    overlapped = backward_collectives if overlap and training else ()
    if overlapped:
        backward_collectives = ()
    if parameters is None:
        parameters = sum(op.parameter_bytes for op in ops) / strategy.bytes_per_element
    return _Unit(
        ops=ops, recomputed=recomputed if training else (),
        forward_collectives=forward_collectives,
        backward_collectives=(*backward_collectives, *recompute_collectives) if training else (),
        overlapped_collectives=overlapped,
        overlap_s=_weight_gradient_s(ops, hardware, peak) if overlapped else 0.0,
        forward_s=forward_s, backward_s=backward_s + recompute_s if training else 0.0,
        recompute_s=recompute_s if training else 0.0,
        forward_flops=flops,
        backward_flops=2.0 * flops + sum(op.flops for op in recomputed) if training else 0.0,
        gemm_flops=sum(op.flops for op in ops if op.kind == "gemm"),
        parameters=parameters, activation_bytes=activation_bytes, send_bytes=send_bytes,
    )


def _recomputed(ops: tuple[Operator, ...], strategy: Strategy) -> tuple[Operator, ...]:
    """Operators re-run in a layer's backward: all (full), the attention core (selective), none."""
    if strategy.recompute == "full":
        return ops
    if strategy.recompute == "selective":
        return tuple(op for op in ops if op.name in operators.ATTENTION_CORE)
    return ()


def _boundary_bytes(model: ModelSpec, strategy: Strategy) -> float:
    """Stage-boundary activation of a transformer per device: ``b s h B / t``.

    Megatron's scatter/gather optimisation sends ``1/t`` per device and all-gathers on arrival
    (Narayanan et al. SC'21 §4.1); the same size with sequence parallelism.
    """
    return (strategy.microbatch_size * model.sequence_length * model.hidden_size
            * strategy.bytes_per_element / strategy.tp)


def _transformer_units(model: ModelSpec, hardware: Hardware, strategy: Strategy,
                       tied_on_one_stage: bool) -> tuple[_Unit, _Unit, _Unit]:
    """(embedding, layer, logits) units, each costed once."""
    send = _boundary_bytes(model, strategy)
    layer_ops = operators.transformer_layer(model, strategy)
    layer_collectives = operators.transformer_layer_collectives(model, strategy)
    recompute_collectives = layer_collectives if strategy.recompute == "full" else ()
    layer = _unit(layer_ops, _recomputed(layer_ops, strategy),
                  (layer_collectives, layer_collectives, recompute_collectives),
                  memory.layer_activation_bytes(model, strategy), send, None, hardware, strategy,
                  overlap=strategy.tp_overlap)
    embed = _unit(operators.embedding(model, strategy), (),
                  (operators.embedding_collectives(model, strategy), (), ()),
                  memory.embedding_activation_bytes(model, strategy), send, None, hardware, strategy)
    logits_ops = operators.logits(model, strategy)
    logits_parameters = sum(op.weight_bytes for op in logits_ops) / strategy.bytes_per_element
    if tied_on_one_stage:
        logits_parameters -= logits_ops[1].weight_bytes / strategy.bytes_per_element
    logits = _unit(logits_ops, (), (operators.logits_collectives(model, strategy), (), ()),
                   memory.logits_activation_bytes(model, strategy), send, logits_parameters,
                   hardware, strategy)
    return embed, layer, logits


def _resnet_activation(ops: tuple[Operator, ...], strategy: Strategy) -> float:
    """Stashed activations of a ResNet unit: every operator's output (full recompute: the input).

    Inference keeps the largest output in flight. Same accounting as Korthikanti §4 (store what
    the backward reads) applied to convolution, batch norm and ReLU outputs.
    """
    if strategy.mode == "inference":
        return max(op.output_bytes for op in ops)
    if strategy.recompute == "full":
        return ops[0].input_bytes
    return sum(op.output_bytes for op in ops)


def _resnet_units(model: ModelSpec, hardware: Hardware, strategy: Strategy) -> list[tuple[str, _Unit]]:
    units = []
    for name, ops in operators.resnet50_units(model, strategy):
        forward, backward = operators.convolution_collectives(ops, strategy)
        recompute = forward if strategy.recompute == "full" else ()
        recomputed = ops if strategy.recompute == "full" else ()
        unit = _unit(ops, recomputed, (forward, backward, recompute), _resnet_activation(ops, strategy),
                     ops[-1].output_bytes, None, hardware, strategy)
        units.append((name, unit))
    return units


def _units_per_item(model: ModelSpec, hardware: Hardware, strategy: Strategy) -> tuple[
        list[tuple[str, _Unit]], _Unit | None, _Unit | None]:
    """(partitionable items, unit prepended to the first stage, unit appended to the last)."""
    if not model.is_transformer:
        return _resnet_units(model, hardware, strategy), None, None
    tied = model.architecture != "llama" and strategy.pp * strategy.num_chunks == 1
    embed, layer, logits = _transformer_units(model, hardware, strategy, tied)
    return [(f"layer{index}", layer) for index in range(model.num_layers)], embed, logits


def uniform_partition(items: int, parts: int) -> tuple[int, ...]:
    """Items per part as even as possible by count; the first ``items % parts`` get one more."""
    base, extra = divmod(items, parts)
    return tuple(base + (1 if index < extra else 0) for index in range(parts))


def _greedy_parts(costs: Sequence[float], limit: float) -> int:
    """Fewest contiguous parts with sums <= ``limit`` (greedy is optimal for this test)."""
    parts, current = 1, 0.0
    for cost in costs:
        if current + cost > limit:
            parts, current = parts + 1, 0.0
        current += cost
    return parts


def _split(costs: Sequence[float], parts: int, limit: float) -> tuple[int, ...]:
    """Exactly ``parts`` non-empty contiguous parts, each <= ``limit`` when that is feasible."""
    counts: list[int] = []
    current, size = 0.0, 0
    for index, cost in enumerate(costs):
        later = parts - len(counts) - 1
        must_cut = len(costs) - index == later
        if size and later and (must_cut or current + cost > limit):
            counts.append(size)
            current, size = 0.0, 0
        current, size = current + cost, size + 1
    return (*counts, size)


def balanced_partition(costs: Sequence[float], parts: int) -> tuple[int, ...]:
    """Contiguous split of ``costs`` into ``parts`` non-empty parts minimising the largest sum.

    Binary search on the largest sum with a greedy feasibility test (the linear-partition
    problem; O(n log(1/eps))). Never worse than :func:`uniform_partition` (checked, kept if so).

    Raises:
        InputError: more parts than items.
    """
    if parts > len(costs):
        raise InputError(f"cannot split {len(costs)} layers into {parts} stages")
    low, high = max(costs), float(sum(costs))
    for _ in range(100):
        if high - low <= 1e-12 * high:
            break
        middle = 0.5 * (low + high)
        if _greedy_parts(costs, middle) <= parts:
            high = middle
        else:
            low = middle
    balanced = _split(costs, parts, high)
    uniform = uniform_partition(len(costs), parts)
    return balanced if _largest(costs, balanced) <= _largest(costs, uniform) else uniform


def _largest(costs: Sequence[float], counts: Sequence[int]) -> float:
    """Largest part sum of a partition."""
    largest, start = 0.0, 0
    for count in counts:
        largest = max(largest, float(sum(costs[start:start + count])))
        start += count
    return largest


def _partition(items: list[tuple[str, _Unit]], first: _Unit | None, last: _Unit | None,
               strategy: Strategy) -> tuple[int, ...]:
    """Items per virtual stage for the strategy's ``partition``."""
    parts = strategy.pp * strategy.num_chunks
    if strategy.stage_layers is not None:
        return strategy.stage_layers
    if strategy.partition == "uniform":
        return uniform_partition(len(items), parts)
    costs = [unit.training_s for _, unit in items]
    costs[0] += first.training_s if first else 0.0
    costs[-1] += last.training_s if last else 0.0
    return balanced_partition(costs, parts)


def _merge(collectives: Sequence[tuple[tuple[Collective, ...], int]]) -> tuple[Collective, ...]:
    """Sum the counts of identical (kind, size) collectives, keeping first-seen order."""
    counts: dict[tuple[str, float], int] = {}
    for group, repeat in collectives:
        for collective in group:
            key = (collective.kind, collective.size_bytes)
            counts[key] = counts.get(key, 0) + collective.count * repeat
    return tuple(Collective(kind=kind, size_bytes=size, count=count)
                 for (kind, size), count in counts.items())


def _groups(entries: Sequence[tuple[str, _Unit]]) -> list[tuple[_Unit, int]]:
    """Identical units of a stage with their counts (in first-seen order)."""
    groups: dict[int, list] = {}
    for _, unit in entries:
        groups.setdefault(id(unit), [unit, 0])[1] += 1
    return [(unit, count) for unit, count in groups.values()]


def _idle_pass(segments: int) -> PassCost:
    """A pass that does nothing (backward and update of inference)."""
    return PassCost(compute_s=0.0, dram_bytes=0.0, tp_collectives=(), segments=segments, flops=0.0)


def _optimizer_step(parameters: float, dram_bytes: float, segments: int, hardware: Hardware,
                    strategy: Strategy) -> PassCost:
    """Element-wise update of the device's (ZeRO-sharded) parameters as one fused kernel.

    Moves :func:`~simulator.workload.memory.optimizer_step_bytes_per_parameter` bytes per
    parameter (Adam fp16: 28) at the memory-bound efficiency; ZeRO >= 1 updates ``1/dp``.
    """
    if strategy.mode == "inference":
        return _idle_pass(segments)
    updated = parameters / (strategy.dp if strategy.zero_stage >= 1 else 1)
    moved = updated * memory.optimizer_step_bytes_per_parameter(strategy)
    cal = hardware.calibration
    per_parameter = ADAM_FLOP_PER_PARAMETER if strategy.optimizer == "adam" else SGD_FLOP_PER_PARAMETER
    compute_s = moved / (_bandwidth(hardware) * cal.memory_bound_efficiency) + cal.kernel_overhead_s
    return PassCost(compute_s=compute_s, dram_bytes=dram_bytes, tp_collectives=(), segments=segments,
                    flops=updated * per_parameter)


def dp_collectives(parameters: float, strategy: Strategy) -> tuple[Collective, ...]:
    """Data-parallel collectives of one iteration on one device (sizes in bytes).

    ZeRO 0: all-reduce of the gradients (``parameters x B``). ZeRO 1 and 2: reduce-scatter of the
    gradients and all-gather of the updated weights, the same volume as an all-reduce
    (Rajbhandari et al. SC'20, §7.2.1). ZeRO 3: the same two; its per-microbatch re-gather of
    weights in forward and backward (§7.2.2) is out of scope. Empty for ``dp == 1`` and inference.
    """
    if strategy.dp == 1 or strategy.mode == "inference":
        return ()
    size = parameters * strategy.bytes_per_element
    if strategy.zero_stage == 0:
        return (Collective(kind="all_reduce", size_bytes=size),)
    return (Collective(kind="reduce_scatter", size_bytes=size),
            Collective(kind="all_gather", size_bytes=size))


def _sram_plan(groups: list[tuple[_Unit, int]], hardware: Hardware,
               strategy: Strategy) -> sram.SramPlan | None:
    """PALM Algorithm 1 over the stage (mesh only)."""
    if not hardware.network.plans_sram:
        return None
    return sram.plan_stage([(unit.ops, count) for unit, count in groups], hardware.sram_bytes, strategy,
                           [(unit.recomputed, count) for unit, count in groups if unit.recomputed])


def _stage_cost(entries: Sequence[tuple[str, _Unit]], hardware: Hardware, strategy: Strategy) -> StageCost:
    """Cost of one virtual stage made of ``entries`` (name, unit)."""
    groups, segments = _groups(entries), len(entries)
    plan = _sram_plan(groups, hardware, strategy)
    parameters = sum(unit.parameters * count for unit, count in groups)
    forward = PassCost(
        compute_s=sum(unit.forward_s * count for unit, count in groups),
        dram_bytes=plan.forward_dram_bytes if plan else 0.0,
        tp_collectives=_merge([(unit.forward_collectives, count) for unit, count in groups]),
        segments=segments, flops=sum(unit.forward_flops * count for unit, count in groups))
    backward = _idle_pass(segments) if strategy.mode == "inference" else PassCost(
        compute_s=sum(unit.backward_s * count for unit, count in groups),
        dram_bytes=plan.backward_dram_bytes if plan else 0.0,
        tp_collectives=_merge([(unit.backward_collectives, count) for unit, count in groups]),
        segments=segments, flops=sum(unit.backward_flops * count for unit, count in groups),
        recompute_s=sum(unit.recompute_s * count for unit, count in groups),
        overlapped_collectives=_merge([(unit.overlapped_collectives, count) for unit, count in groups]),
        overlap_s=sum(unit.overlap_s * count for unit, count in groups))
    states = memory.sharded_state_bytes(parameters, strategy)
    gemm_flops = sum(unit.gemm_flops * count for unit, count in groups)
    return StageCost(
        units=tuple(name for name, _ in entries), forward=forward, backward=backward,
        optimizer_step=_optimizer_step(parameters, plan.update_dram_bytes if plan else 0.0, segments,
                                       hardware, strategy),
        activation_send_bytes=entries[-1][1].send_bytes,
        gradient_send_bytes=entries[0][1].send_bytes if strategy.mode == "training" else 0.0,
        dp_collectives=dp_collectives(parameters, strategy), parameters=parameters,
        model_flops_per_microbatch=gemm_flops * (3.0 if strategy.mode == "training" else 1.0),
        memory=MemoryBreakdown(
            weights_bytes=states.weights_bytes, gradients_bytes=states.gradients_bytes,
            optimizer_bytes=states.optimizer_bytes,
            activation_bytes_per_microbatch=sum(unit.activation_bytes * count for unit, count in groups),
            sram_resident_bytes=plan.resident_bytes if plan else 0.0),
    )


def build_stage_costs(model: ModelSpec, hardware: Hardware, strategy: Strategy) -> tuple[StageCost, ...]:
    """Per-device costs of each virtual pipeline stage, indexed by virtual stage ``c * pp + i``.

    Args:
        model: the model's shapes.
        hardware: the machine (``mesh`` uses PALM Algorithm 1 for DRAM traffic; ``cluster``
            counts HBM traffic inside the compute time).
        strategy: the plan (tp, pp, num_chunks, microbatch, recompute, ZeRO, partition, ...).

    Returns:
        ``pp * num_chunks`` :class:`StageCost` in model order.

    Raises:
        InputError: tp does not divide heads / hidden / FFN (or ResNet channels), sequence
            parallelism with tp not dividing the sequence, more virtual stages than layers,
            explicit ``stage_layers`` not summing to the layers or with an empty stage,
            microbatch larger than the global batch, or no peak for the precision.
    """
    check_workload(model, hardware, strategy)
    items, first, last = _units_per_item(model, hardware, strategy)
    counts = _partition(items, first, last, strategy)
    stages, start, cache = [], 0, {}
    for index, count in enumerate(counts):
        entries = list(items[start:start + count])
        start += count
        if first is not None and index == 0:
            entries.insert(0, ("embedding", first))
        if last is not None and index == len(counts) - 1:
            entries.append(("logits", last))
        key = tuple((id(unit), n) for unit, n in _groups(entries))
        if key not in cache:
            cache[key] = _stage_cost(entries, hardware, strategy)
        stages.append(replace(cache[key], units=tuple(name for name, _ in entries)))
    return tuple(stages)


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
    vocab = model.vocab_size
    if recompute:
        return 96.0 * batch * s * layers * h * h * (1.0 + s / (6.0 * h) + vocab / (16.0 * layers * h))
    return 72.0 * batch * s * layers * h * h * (1.0 + s / (6.0 * h) + vocab / (12.0 * layers * h))
