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
Narayanan et al. SC'21 §5.1) and two kernels for a GEMM. Recompute adds a forward (full) or the
attention core (selective) to the backward (Korthikanti et al., MLSys'23).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator.costs import Collective, MemoryBreakdown, PassCost, StageCost
from simulator.errors import InputError
from simulator.hardware.spec import Hardware
from simulator.strategy import Strategy
from simulator.workload import memory, operators, sram
from simulator.workload.operators import Operator
from simulator.workload.spec import ModelSpec

ADAM_FLOP_PER_PARAMETER = 10.0
"""Adam update arithmetic per parameter: moments 3 + 4, step 3 (Kingma & Ba 2015, Alg. 1)."""

SGD_FLOP_PER_PARAMETER = 2.0
"""SGD update arithmetic per parameter: scale and subtract."""

RESNET50_BLOCK_CHANNELS = 64
"""Smallest channel count of ResNet-50 (stem and conv2_x width); tp must divide it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Unit:
    """One unit's operators and per-microbatch costs on one device (internal)."""

    ops: tuple[Operator, ...]
    recomputed: tuple[Operator, ...]
    forward_collectives: tuple[Collective, ...]
    backward_collectives: tuple[Collective, ...]
    forward_s: float
    backward_s: float
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
    if hardware.kind == "mesh":
        return hardware.sram_bandwidth_bytes_per_s
    return hardware.network.hbm_bandwidth_bytes_per_s


def _op_time(op: Operator, factor: float, kernels: int, hardware: Hardware, peak: float) -> float:
    """Roofline time of ``factor`` x the operator's flops and bytes, plus ``kernels`` launches (s)."""
    cal = hardware.calibration
    moved = factor * (op.input_bytes + op.weight_bytes + op.output_bytes)
    compute = factor * op.flops / (peak * cal.gemm_efficiency)
    return max(compute, moved / (_bandwidth(hardware) * cal.memory_bound_efficiency)) + kernels * cal.kernel_overhead_s


def _pass_times(ops: Sequence[Operator], hardware: Hardware, peak: float) -> tuple[float, float]:
    """(forward, backward without recompute) time of ``ops`` (s)."""
    forward = sum(_op_time(op, 1.0, 1, hardware, peak) for op in ops)
    backward = sum(_op_time(op, 2.0, 2 if op.kind == "gemm" else 1, hardware, peak) for op in ops)
    return forward, backward


def _unit(ops: tuple[Operator, ...], recomputed: tuple[Operator, ...], collectives: tuple[tuple, tuple, tuple],
          activation_bytes: float, send_bytes: float, parameters: float | None,
          hardware: Hardware, strategy: Strategy) -> _Unit:
    """Cost one unit; ``collectives`` = (forward, backward, recompute) TP collectives."""
    peak = _peak(hardware, strategy)
    forward_s, backward_s = _pass_times(ops, hardware, peak)
    recompute_s = _pass_times(recomputed, hardware, peak)[0]
    training = strategy.mode == "training"
    flops = sum(op.flops for op in ops)
    forward_collectives, backward_collectives, recompute_collectives = collectives
    if parameters is None:
        parameters = sum(op.weight_bytes for op in ops) / strategy.bytes_per_element
    return _Unit(
        ops=ops, recomputed=recomputed if training else (),
        forward_collectives=forward_collectives,
        backward_collectives=(*backward_collectives, *recompute_collectives) if training else (),
        forward_s=forward_s, backward_s=backward_s + recompute_s if training else 0.0,
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
                  memory.layer_activation_bytes(model, strategy), send, None, hardware, strategy)
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
