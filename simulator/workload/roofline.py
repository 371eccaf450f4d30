"""Time of operators on one device: a roofline with the hardware's calibration.

Operator time is a roofline (Williams et al., CACM 2009):
``max(flops / (peak * gemm_efficiency), bytes / (bandwidth * memory_bound_efficiency))
+ kernel_overhead_s``, where ``bytes = input + weight + output`` and the bandwidth is the SRAM's
on a mesh (DRAM traffic goes separately to the engine, from PALM Algorithm 1 in
:mod:`simulator.workload.sram`) and the HBM's on a cluster. The backward of an operator is ``2x``
its forward flops and bytes (data and weight gradients; Narayanan et al. SC'21 §5.1) and two
kernels for a GEMM; with ``tp_overlap`` a layer's backward TP collectives run under its
weight-gradient GEMMs (Korthikanti et al., MLSys'23, §6.2). Recompute adds a forward (full) or
the attention core (selective) to the backward (same source).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from simulator.costs import Collective, PassCost
from simulator.errors import InputError
from simulator.hardware.spec import FP8_RECIPE_KEYS, Hardware
from simulator.network.mesh import Mesh
from simulator.strategy import WORKING_PRECISION, Strategy
from simulator.workload.gemm_pipeline import k_loop_s
from simulator.workload.matrix_feed import fed_flop_per_s
from simulator.workload.operators import Operator, UnitCollectives, parameter_count
from simulator.workload.tiled_stage import TILE_SIDE

ADAM_FLOP_PER_PARAMETER = 10.0
"""Adam update arithmetic per parameter: moments 3 + 4, step 3 (Kingma & Ba 2015, Alg. 1)."""

SGD_FLOP_PER_PARAMETER = 2.0
"""SGD update arithmetic per parameter: scale and subtract."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UnitCost:
    """One unit's (a layer, the embedding, a ResNet block) operators and per-microbatch costs on
    one device: times in s, flops in flop, bytes in bytes, parameters in elements."""

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
    recompute_gemm_flops: float
    parameters: float
    activation_bytes: float
    send_bytes: float
    context_forward: tuple[Collective, ...] = ()
    context_backward: tuple[Collective, ...] = ()
    attention_forward_s: float = 0.0
    attention_backward_s: float = 0.0
    expert_forward: tuple[Collective, ...] = ()
    """Expert-parallel all-to-alls of its forward (token dispatch and combine)."""
    forward_launch_s: float = 0.0
    """The kernel launches' share of ``forward_s`` (s)."""
    backward_launch_s: float = 0.0
    """The kernel launches' share of ``backward_s``, recompute's included (s)."""
    expert_backward: tuple[Collective, ...] = ()
    """Those of its backward, a full recompute's forward included (empty for inference)."""
    expert_parameters: float = 0.0
    """The part of ``parameters`` in routed experts (elements; :attr:`Operator.expert`)."""
    weight_gradient_s: float = 0.0
    """Time of its weight-gradient GEMMs, part of ``backward_s`` (s; 0 for inference)."""
    weight_gradient_flops: float = 0.0
    """Their flops, part of ``backward_flops`` (flop; 0 for inference)."""
    parameter_bytes: float = 0.0
    """Bytes its ``parameters`` are held in where a serving stack stores some of them in a format
    of their own (:attr:`Operator.b_bytes_per_element`); 0: ``parameters`` x the strategy's."""

    @property
    def training_s(self) -> float:
        """Forward + backward compute time (s), the balanced partition's measure."""
        return self.forward_s + self.backward_s


@dataclass(frozen=True, slots=True)
class Costing:
    """What :func:`cost_unit` takes beyond a unit's operators: the device (its FP8 GEMM
    efficiency the strategy's FP8 scaling recipe's,
    :meth:`~simulator.hardware.spec.Calibration.fp8_efficiency`), its peak at the strategy's
    working precision (flop/s; :func:`peak_flop_per_s`), whether the strategy trains (else
    backward costs are 0), whether its backward re-runs the expert-parallel all-to-alls (a full
    recompute, or selective recompute of the MoE layer), the working precision's bytes per
    element and the cores of one die a tensor-parallel group spans (the grid a tiled chip's GEMM
    runs on: across chips the group's input moves by its collectives, not by the chip's
    multicast)."""

    hardware: Hardware
    peak_flop_per_s: float
    training: bool
    recompute_experts: bool
    bytes_per_element: float
    group: int = 1

    @classmethod
    def of(cls, hardware: Hardware, strategy: Strategy) -> Costing:
        """The costing of ``strategy`` on ``hardware``.

        Raises:
            InputError: the hardware states no peak for the strategy's precision.
        """
        if strategy.fp8_recipe != "delayed":  # the recipe's FP8 GEMM efficiency stands for the default's
            hardware = replace(hardware, calibration=replace(
                hardware.calibration, fp8_gemm_efficiency=_recipe_efficiency(hardware, strategy.fp8_recipe)))
        return cls(hardware, peak_flop_per_s(hardware, strategy), strategy.training,
                   strategy.recompute == "full" or "moe" in strategy.recomputed_modules,
                   strategy.bytes_per_element, _die_group(hardware, strategy.tp))


def _recipe_efficiency(hardware: Hardware, recipe: str) -> float:
    """The hardware's FP8 GEMM efficiency under ``recipe``.

    Raises:
        InputError: the hardware states none for it.
    """
    efficiency = hardware.calibration.fp8_efficiency(recipe)
    if efficiency is None:
        raise InputError(f"strategy: `fp8_recipe` {recipe!r}: hardware {hardware.name!r} states no"
                         f" {FP8_RECIPE_KEYS[recipe]}")
    return efficiency


def _die_group(hardware: Hardware, tp: int) -> int:
    """The cores of one die a tensor-parallel group of ``tp`` spans (``tp`` off meshes)."""
    network = hardware.network
    return min(tp, network.cores_x * network.cores_y) if isinstance(network, Mesh) else tp


def peak_flop_per_s(hardware: Hardware, strategy: Strategy) -> float:
    """The device's peak at the strategy's working precision (bfloat16 under ``fp8``, whose FP8
    GEMMs take :func:`operator_s`'s own peak) over the passes of its math fidelity
    (flop/s; Tenstorrent's matrix engine: "TFLOPS are calculated by dividing by the
    MATH_FIDELITY value", tt-metal ``tech_reports/matrix_engine``), or the lower rate at which the
    device's SRAM feeds its matrix engine where the hardware states one
    (:func:`~simulator.workload.matrix_feed.fed_flop_per_s`).

    Raises:
        InputError: the hardware states no peak for that precision.
    """
    return format_peak_flop_per_s(hardware, WORKING_PRECISION.get(strategy.precision, strategy.precision),
                                  strategy.math_fidelity)


def format_peak_flop_per_s(hardware: Hardware, precision: str, fidelity: str | None) -> float:
    """The device's peak for operands in ``precision`` at the passes of math ``fidelity`` (None:
    one pass), as :func:`peak_flop_per_s` (flop/s).

    Raises:
        InputError: the hardware states no peak for that precision.
    """
    passes = hardware.compute.math_fidelity_phases[fidelity] if fidelity else 1
    try:
        return fed_flop_per_s(hardware, precision, passes)
    except KeyError:
        raise InputError(
            f"hardware {hardware.name!r} has no peak for precision {precision!r}"
            f" (has {sorted(hardware.compute.peak_flop_per_s)})"
        ) from None


def operator_s(op: Operator, factor: float, kernels: int, hardware: Hardware, peak: float, group: int = 1,
               *, backward: bool = False) -> float:
    """Roofline time of ``factor`` x the operator's flops and bytes, plus ``kernels`` launches (s);
    fused attention's ``backward`` kernel at its own efficiency where the hardware states one.

    On a tiled chip that states its data movement, a GEMM with weights takes at least its K
    loop on its ``group`` of cores (tensor-parallel, sharing its input where it is
    :attr:`~Operator.shared_input`): each K-block's weights read from DRAM and input multicast
    before its tile products, the first block filling the pipeline
    (:func:`simulator.workload.gemm_pipeline.k_loop_s`, as :mod:`~simulator.workload.grid_gemm`
    times a GEMM on a core grid).

    On a GPU a GEMM also loses its tile and wave quantization
    (:meth:`~simulator.hardware.spec.Compute.gemm_efficiency`); its backward GEMMs are
    charged the forward's quantization (their shapes are the forward's transposed pairs). An
    FP8 GEMM (:attr:`Operator.fp8`) runs at the hardware's FP8 peak and FP8 GEMM efficiency.
    An operator's :attr:`~Operator.serial_bytes` (a tt-metal convolution's tilize) add their
    time at the same bandwidth after the roofline's ``max``. A serving stack's operator runs at
    its own :attr:`~Operator.peak_flop_per_s` and :attr:`~Operator.tile` where it has them.
    """
    cal = hardware.calibration
    moved = factor * (op.input_bytes + op.weight_bytes + op.output_bytes)
    efficiency = cal.gemm_efficiency
    peak = op.peak_flop_per_s or peak
    if op.fp8:
        peak, efficiency = hardware.compute.peak_flop_per_s["fp8"], cal.fp8_gemm_efficiency or 0.0
    if op.kind == "gemm":
        efficiency *= hardware.compute.gemm_efficiency(op.rows, op.columns, op.tile)
    elif op.kind == "attention":
        efficiency = ((backward and cal.fused_attention_backward_efficiency) or cal.fused_attention_efficiency
                      or cal.gemm_efficiency)
    compute = factor * op.flops * op.executed_fraction / (peak * efficiency)
    bandwidth = hardware.memory.operand_bandwidth_bytes_per_s * cal.memory_bound_efficiency
    serial_s = factor * op.serial_bytes / bandwidth
    loop = _k_loop_s(op, hardware, compute, peak * efficiency, group) if factor == 1.0 else 0.0
    return max(compute, moved / bandwidth, loop) + serial_s + kernels * cal.kernel_overhead_s


def _k_loop_s(op: Operator, hardware: Hardware, compute_s: float, rate: float, group: int) -> float:
    """The K loop of a weighted GEMM on its ``group``'s cores, or whole on its serving stack's
    grid, its tile products at ``rate`` (flop/s of one core) (s; 0 for other operators):
    :mod:`simulator.workload.gemm_pipeline`."""
    if op.kind != "gemm" or not op.weight_bytes:
        return 0.0
    m, n = op.rows, op.columns
    k = op.flops / (2.0 * m * n)
    tile_bytes = TILE_SIDE**2 * (op.b_bytes_per_element or op.weight_bytes / (k * n))
    if op.grid is None:
        cores = group if op.shared_input else 1
        return k_loop_s(hardware, m=m, k=k, n=n * cores, grid=(cores, 1), tile_bytes=tile_bytes,
                        in_dram=(False, True, False), compute_s=compute_s)
    whole_n, whole_k = (n * group, k) if op.shared_input else (n, k * group)
    return k_loop_s(hardware, m=m, k=whole_k, n=whole_n, grid=op.grid, tile_bytes=tile_bytes,
                    in_dram=op.grid_in_dram, peak_flop_per_s=rate)


FUSED_ATTENTION_BACKWARD = 2.5
"""FlashAttention's backward over its forward in flops: five matrix products against two, the
scores recomputed inside the kernel (Dao, FlashAttention-2, ICLR'24, §4.1 benchmark setting)."""


def _pass_times(ops: Sequence[Operator], hardware: Hardware, peak: float, group: int = 1) -> tuple[float, float]:
    """(forward, backward without recompute) time of ``ops`` (s) on a tensor-parallel ``group``:
    a GEMM's backward is two GEMMs as large, an element-wise operator's one pass, fused
    attention's its own kernel."""
    forward = sum(operator_s(op, 1.0, op.launches, hardware, peak, group) for op in ops)
    backward = sum(operator_s(op, FUSED_ATTENTION_BACKWARD, 1, hardware, peak, backward=True)
                   if op.kind == "attention" else
                   operator_s(op, 2.0, 2 if op.kind == "gemm" else 1, hardware, peak) for op in ops)
    return forward, backward


def _launches(ops: Sequence[Operator]) -> tuple[int, int]:
    """(forward, backward without recompute) kernel launches of ``ops``, as :func:`_pass_times` counts them."""
    return (sum(op.launches for op in ops),
            sum(1 if op.kind == "attention" else 2 if op.kind == "gemm" else 1 for op in ops))


def _backward_flops(ops: Sequence[Operator]) -> float:
    """Flops the backward of ``ops`` executes (recompute aside): twice a GEMM's, fused
    attention's :data:`FUSED_ATTENTION_BACKWARD` times what its forward executes."""
    return sum(FUSED_ATTENTION_BACKWARD * op.flops * op.executed_fraction if op.kind == "attention" else 2.0 * op.flops
               for op in ops)


def _weight_gradient_s(ops: Sequence[Operator], hardware: Hardware, peak: float) -> float:
    """Time of the weight-gradient GEMMs of ``ops`` (one per weighted GEMM, its forward's
    flops), the compute Megatron-LM runs under the input-gradient all-reduce (s)."""
    return sum(operator_s(op, 1.0, 1, hardware, peak) for op in ops if op.kind == "gemm" and op.weight_bytes)


def _weight_gradient_flops(ops: Sequence[Operator]) -> float:
    """Flops of the weight-gradient GEMMs of ``ops``: each weighted GEMM's forward flops, the
    half of its backward's ``2x`` (:func:`_backward_flops`) that :func:`_weight_gradient_s` times."""
    return sum(op.flops for op in ops if op.kind == "gemm" and op.weight_bytes)


def cost_unit(ops: tuple[Operator, ...], *, recomputed: tuple[Operator, ...], collectives: UnitCollectives,
              activation_bytes: float, send_bytes: float, costing: Costing, parameters: float | None = None,
              overlap: bool = False) -> UnitCost:
    """Cost one unit per microbatch on one device.

    Args:
        ops: the unit's forward operators (already split by tensor parallelism).
        recomputed: operators re-run in the backward.
        collectives: its TP collectives; with ``overlap`` the backward ones run under the
            weight-gradient GEMMs (``tp_overlap``).
        activation_bytes: activations stashed per microbatch until the backward (bytes).
        send_bytes: activation sent to the next stage if the unit ends one (bytes).
        costing: the device and the strategy's fields the costs take.
        parameters: its parameters (elements); by default the operators' parameter bytes over
            the working precision.
    """
    hardware, peak, training = costing.hardware, costing.peak_flop_per_s, costing.training
    bytes_per_element = costing.bytes_per_element
    forward_s, backward_s = _pass_times(ops, hardware, peak, costing.group)
    recompute_s = _pass_times(recomputed, hardware, peak, costing.group)[0]
    flops = sum(op.flops * op.executed_fraction for op in ops)
    overlapped = collectives.backward if overlap and training else ()
    backward = () if overlapped else collectives.backward
    if parameters is None:
        parameters = parameter_count(ops, bytes_per_element)
    attention_forward_s, attention_backward_s = _pass_times([op for op in ops if op.kind == "attention"],
                                                            hardware, peak)
    recompute_experts = collectives.expert if costing.recompute_experts else ()
    overhead = hardware.calibration.kernel_overhead_s
    forward_launches, backward_launches = _launches(ops)
    backward_launches += _launches(recomputed)[0]
    return UnitCost(
        forward_launch_s=forward_launches * overhead,
        backward_launch_s=backward_launches * overhead if training else 0.0,
        expert_forward=collectives.expert,
        expert_backward=(*collectives.expert, *recompute_experts) if training else (),
        expert_parameters=parameter_count([op for op in ops if op.expert], bytes_per_element),
        context_forward=collectives.context_forward,
        context_backward=collectives.context_backward if training else (),
        attention_forward_s=attention_forward_s,
        attention_backward_s=attention_backward_s if training else 0.0,
        ops=ops, recomputed=recomputed if training else (),
        forward_collectives=collectives.forward,
        backward_collectives=(*backward, *collectives.recompute) if training else (),
        overlapped_collectives=overlapped,
        overlap_s=_weight_gradient_s(ops, hardware, peak) if overlapped else 0.0,
        forward_s=forward_s, backward_s=backward_s + recompute_s if training else 0.0,
        recompute_s=recompute_s if training else 0.0,
        forward_flops=flops,
        backward_flops=_backward_flops(ops) + sum(op.flops for op in recomputed) if training else 0.0,
        gemm_flops=sum(op.flops for op in ops if op.kind in ("gemm", "attention")),
        recompute_gemm_flops=sum(op.flops for op in recomputed if op.kind in ("gemm", "attention"))
        if training else 0.0,
        parameters=parameters, activation_bytes=activation_bytes, send_bytes=send_bytes,
        weight_gradient_s=_weight_gradient_s(ops, hardware, peak) if training else 0.0,
        weight_gradient_flops=_weight_gradient_flops(ops) if training else 0.0,
        parameter_bytes=sum(op.parameter_bytes for op in ops) if any(op.b_bytes_per_element for op in ops) else 0.0,
    )


def idle_pass(segments: int) -> PassCost:
    """A pass that does nothing (backward and update of inference)."""
    return PassCost(compute_s=0.0, dram_bytes=0.0, tp_collectives=(), segments=segments, flops=0.0)


def optimizer_step(updated_parameters: float, bytes_per_parameter: float, optimizer: str, dram_bytes: float,
                   segments: int, hardware: Hardware) -> PassCost:
    """Element-wise update of a device's ``updated_parameters`` (its ZeRO shard:
    :func:`~simulator.workload.memory.updated_parameters`) as one fused kernel.

    Moves ``bytes_per_parameter``
    (:func:`~simulator.workload.memory.optimizer_step_bytes_per_parameter`, Adam fp16: 28) per
    parameter at the memory-bound efficiency, and ``optimizer``'s arithmetic
    (:data:`ADAM_FLOP_PER_PARAMETER`, :data:`SGD_FLOP_PER_PARAMETER`); ``dram_bytes`` is the
    update's DRAM traffic where a planner gives it (bytes).
    """
    moved = updated_parameters * bytes_per_parameter
    cal = hardware.calibration
    per_parameter = ADAM_FLOP_PER_PARAMETER if optimizer == "adam" else SGD_FLOP_PER_PARAMETER
    compute_s = (moved / (hardware.memory.operand_bandwidth_bytes_per_s * cal.memory_bound_efficiency)
                 + cal.kernel_overhead_s)
    return PassCost(compute_s=compute_s, dram_bytes=dram_bytes, tp_collectives=(), segments=segments,
                    flops=updated_parameters * per_parameter)
