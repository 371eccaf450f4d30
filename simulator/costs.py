"""Per-stage costs: what one device of a pipeline stage spends per microbatch and per iteration.

The engine (:mod:`simulator.engine`) turns these per-device costs into time on shared links and
DRAM ports; everything here is contention-free arithmetic on shapes. Built by
:func:`simulator.workload.stages.build_stage_costs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simulator.passes import PassKind

CollectiveKind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Collective:
    """``count`` collectives of one kind over a communication group (TP or DP).

    Attributes:
        kind: ``all_reduce``, ``all_gather``, ``reduce_scatter`` or ``all_to_all``.
        size_bytes: the full buffer of one collective on one device (for an all-gather, the
            gathered output; for a reduce-scatter, the input), as in NCCL's convention.
        count: how many such collectives run back to back.
    """

    kind: CollectiveKind
    size_bytes: float
    count: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class PassCost:
    """One pass (forward, backward, or optimizer step) of one microbatch on one device.

    The pass is ``segments`` identical segments (one per layer): each computes for
    ``compute_s / segments`` while streaming ``dram_bytes / segments`` from DRAM, then runs
    its share of ``tp_collectives``.

    Attributes:
        compute_s: busy time of the device's compute units, roofline over on-chip operands with
            the hardware's calibration (s). On a GPU cluster it includes HBM time.
        dram_bytes: off-chip DRAM traffic through the mesh's DRAM ports (bytes; 0 on clusters,
            whose HBM is local and inside ``compute_s``).
        tp_collectives: tensor-parallel collectives of the whole pass.
        segments: number of layers the pass is split into (>= 1).
        flops: arithmetic of the pass on one device (flop), recompute included.
        recompute_s: the part of ``compute_s`` that re-runs forward operators (backward with
            recompute; s), for timelines.
        overlapped_collectives: TP collectives that run under ``overlap_s`` of the pass's
            compute (``Strategy.tp_overlap``); only what exceeds it is exposed.
        replica_collectives: collectives over the stage's data-parallel group that run under
            the pass's whole ``compute_s``: the tiled chip's weight multicast to the replicas,
            ZeRO-3's prefetched parameter gathers.
        overlap_s: compute of the whole pass that hides ``overlapped_collectives`` and the
            tiled multicast (s).
        cp_collectives: context-parallel collectives over the stage's ``cp`` groups (ring
            attention's keys and values), run under ``cp_overlap_s`` of attention compute; only
            what exceeds it is exposed.
        cp_overlap_s: the pass's attention compute that hides ``cp_collectives`` (s).
        exposed_dp_collectives: collectives over the stage's data-parallel group that no
            compute hides, run after the pass (ZeRO-3's first unit's gather, and in the backward
            its last unit's reduce-scatter: :func:`simulator.workload.stages.zero3_collectives`).
        ep_collectives: expert-parallel all-to-alls over the stage's ``ep`` groups (token
            dispatch and combine of its Mixture-of-Experts layers), exposed (Megatron-Core runs
            them between the router and the experts and after the experts) but what
            ``ep_overlap_s`` hides.
        ep_overlap_s: compute of the pass merged with this one that hides its
            ``ep_collectives`` (s; :attr:`simulator.strategy.Strategy.ep_overlap`: a 1F1B
            forward's and the next backward's, each the other's); 0: none.
        host_s: host time after the pass that the device waits for, in series with everything
            above (s): a decode step's logits read back and sampled on the host
            (:func:`simulator.workload.formats.host_sampling_s`).
        launch_s: the kernel launches' share of the pass's compute that no DRAM stream overlaps,
            in series like ``host_s`` (s): on a mesh, whose DRAM streams beside the compute, the
            op-to-op gap between two kernels moves nothing (the hardware's ``kernel_overhead_s``
            per launch); 0 where launches sit inside ``compute_s``. Counted as compute time.
    """

    compute_s: float
    dram_bytes: float
    tp_collectives: tuple[Collective, ...]
    segments: int
    flops: float
    recompute_s: float = 0.0
    overlapped_collectives: tuple[Collective, ...] = ()
    replica_collectives: tuple[Collective, ...] = ()
    overlap_s: float = 0.0
    cp_collectives: tuple[Collective, ...] = ()
    cp_overlap_s: float = 0.0
    exposed_dp_collectives: tuple[Collective, ...] = ()
    ep_collectives: tuple[Collective, ...] = ()
    ep_overlap_s: float = 0.0
    host_s: float = 0.0
    launch_s: float = 0.0

    @property
    def busy_s(self) -> float:
        """The pass's compute with its launches (s): what its stage reports as compute time."""
        return self.compute_s + self.launch_s

    @property
    def idle_s(self) -> float:
        """Time after the pass's phases in which its device waits (s): its launch gaps and host time."""
        return self.launch_s + self.host_s


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryBreakdown:
    """Memory of one device of a stage (bytes), for capacity checks (REFERENCE formulas).

    Attributes:
        weights_bytes: parameters resident on the device (ZeRO-3 aware).
        gradients_bytes: gradients (ZeRO-2 aware; 0 for inference).
        optimizer_bytes: optimizer states incl. fp32 master weights (ZeRO-1 aware; 0 for SGD
            without momentum beyond master weights, and for inference).
        activation_bytes_per_microbatch: activations stashed by one microbatch until its
            backward (Korthikanti et al. MLSys'23 §4, recompute- and sequence-parallel-aware).
        sram_resident_bytes: bytes Algorithm 1 of PALM keeps resident in on-chip SRAM.
        kv_cache_bytes: inference: the KV cache of every sample of the replica on the stage's
            layers (each user's cache stays between decode steps; 0 in training).
    """

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activation_bytes_per_microbatch: float
    sram_resident_bytes: float
    kv_cache_bytes: float = 0.0

    def total_bytes(self, microbatches_in_flight: int) -> float:
        """Static memory (states and KV cache) plus ``microbatches_in_flight`` stashed
        activations (bytes)."""
        static = self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.kv_cache_bytes
        return static + microbatches_in_flight * self.activation_bytes_per_microbatch


@dataclass(frozen=True, slots=True, kw_only=True)
class StageCost:
    """Costs of one virtual pipeline stage (a model chunk) on one of its devices.

    Attributes:
        units: names of the layers on this stage (e.g. ``("embedding", "layer0", ...)``).
        forward: forward pass of one microbatch.
        backward: backward pass of one microbatch, recompute included (zero for inference).
        backward_input: its input-gradient half (Qi et al. ICLR'24 §2's B): the recompute, the
            input-gradient operators, the TP and context-parallel collectives and ZeRO-3's
            gather. Its compute and flops plus ``backward_weight``'s are ``backward``'s; what the
            weight-gradient GEMMs hid under ``tp_overlap`` is exposed here.
        backward_weight: its weight-gradient half (Qi et al.'s W): the weight-gradient GEMMs
            (one per weighted GEMM, its forward's flops), their share of the DRAM traffic and
            ZeRO-3's gradient reduce-scatter.
        optimizer_step: the gradient update at the end of the iteration.
        activation_send_bytes: bytes one device sends to the next stage per microbatch.
        gradient_send_bytes: bytes one device sends to the previous stage per microbatch.
        dp_collectives: data-parallel collectives of one iteration (gradient all-reduce, or
            ZeRO reduce-scatter / all-gather), issued after the stage's last backward.
        parameters: parameters held by one device before ZeRO sharding (its ``1/ep`` of the
            routed experts included).
        expert_dp_collectives: data-parallel collectives of the routed experts' gradients over
            the stage's ``dp cp / ep`` expert-data-parallel groups, issued with ``dp_collectives``.
        model_flops_per_microbatch: forward + backward flop of one device without recompute
            (for MFU; Narayanan et al. SC'21 Eq. 3 without its recompute term).
        hardware_flops_per_microbatch: ``model_flops_per_microbatch`` plus the recomputed
            forward's, counted the same way (for HFU, Korthikanti et al. MLSys'23 §6: so HFU
            >= MFU, equal without recompute).
        memory: the device's memory.
    """

    units: tuple[str, ...]
    forward: PassCost
    backward: PassCost
    backward_input: PassCost
    backward_weight: PassCost
    optimizer_step: PassCost
    activation_send_bytes: float
    gradient_send_bytes: float
    dp_collectives: tuple[Collective, ...]
    parameters: float
    model_flops_per_microbatch: float
    hardware_flops_per_microbatch: float
    memory: MemoryBreakdown
    expert_dp_collectives: tuple[Collective, ...] = ()

    def pass_cost(self, kind: PassKind) -> PassCost:
        """The cost of a scheduled pass of ``kind`` on this stage.

        Raises:
            ValueError: a kind that is not scheduled on its own (recompute, gradient update).
        """
        match kind:
            case PassKind.FORWARD:
                return self.forward
            case PassKind.BACKWARD:
                return self.backward
            case PassKind.BACKWARD_INPUT:
                return self.backward_input
            case PassKind.BACKWARD_WEIGHT:
                return self.backward_weight
            case PassKind.RECOMPUTE | PassKind.OPTIMIZER_UPDATE:
                raise ValueError(f"a {kind.label} is not a scheduled pass")
