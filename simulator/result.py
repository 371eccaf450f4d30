"""The answer of one simulation: a frozen, JSON-serialisable record."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

SCHEMA_VERSION = 2
"""Version of the JSON documents palm-search writes: ``simulate --json`` (a result's fields),
``optimize --json`` (the run's summary) and a run's ``best.json``. Version 2 gives each quantity
one name in all of them: ``trial`` (an Optuna trial number, also the ``trials.csv`` column),
``model_flops_utilisation``, ``samples_per_s``...; README "Outputs" lists the keys."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StageReport:
    """Time and memory of one pipeline stage over one iteration (per device of the stage).

    Attributes:
        stage: pipeline stage index.
        devices: device ids of the stage.
        compute_s: time computing (roofline with calibration).
        communication_s: exposed tensor- and data-parallel collective time, waiting included.
        dram_stall_s: time DRAM traffic outlasted the computation it overlaps.
        optimizer_s: gradient-update time.
        bubble_s: iteration time not spent on any of the above (idle).
        memory_bytes: peak memory of one device (weights, gradients, optimizer, activations).
        microbatches_in_flight: most microbatches whose activations the stage holds at once.
        sram_resident_bytes: bytes PALM's Algorithm 1 keeps resident in SRAM (mesh only).
        host_s: time the stage waited on the host (a decode step's logits read and sampled there).
    """

    stage: int
    devices: tuple[int, ...]
    compute_s: float
    communication_s: float
    dram_stall_s: float
    optimizer_s: float
    bubble_s: float
    memory_bytes: float
    microbatches_in_flight: int
    sram_resident_bytes: float
    host_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceUsage:
    """Utilisation (bytes carried / (bandwidth x iteration time)) of a class of resources.

    Attributes:
        kind: ``link``, ``nic`` or ``dram``.
        count: resources of this kind in the machine.
        max_utilisation: the busiest one's utilisation: 0..1 under the networks that make
            transfers share or wait for a resource (``sharing``, ``contention``); under
            ``analytical``, which lets them overlap freely, demand over capacity (may exceed 1).
        mean_utilisation: mean over the resources that carried traffic.
        busiest: names of the (up to five) busiest, with their utilisation.
    """

    kind: str
    count: int
    max_utilisation: float
    mean_utilisation: float
    busiest: tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationResult:
    """Outcome of simulating one strategy for one model on one machine.

    Attributes:
        model, hardware: names.
        strategy: the strategy as a dict (:meth:`simulator.strategy.Strategy.to_dict`).
        network: ``analytical`` or ``contention``.
        feasible: False when the strategy exceeds memory; then times are 0 and ``reason`` says why.
        reason: why infeasible ("" when feasible).
        iteration_time_s: one training iteration, or for inference one batch, fill and drain
            included: its latency (a prefill's time to first token, a decode step's time per
            output token) in s.
        samples_per_s, tokens_per_s: the batch over ``iteration_time_s`` (a decode step makes
            one token per sample).
        hardware_flops_utilisation: model flop plus the recomputed forward's per s / peak
            (Korthikanti et al. MLSys'23 §6), so never below the MFU.
        model_flops_utilisation: model flop per s / peak of the devices used (no recompute), at
            the strategy's precision (``fp8``: the FP8 peak, twice the bf16 one on an H100).
        num_microbatches: microbatches per replica per iteration.
        simulated_microbatches: microbatches actually simulated (every run of the steady-state
            extrapolation, short runs whose period was not yet the steady one included, or the
            full count).
        extrapolated: whether the iteration time was extrapolated from steady state.
        replicas_simulated: data-parallel replicas whose flows were built (:mod:`simulator.replicas`):
            ``dp`` when the replicas were not known to load the machine alike (or for a hybrid
            sharding), fewer when the rest were taken as their exact copies.
        stages: per pipeline stage reports.
        resources: utilisation summary per resource kind.
        traffic_bytes: bytes moved per traffic class (``tp``, ``dp``, ``p2p``, ``dram``).
        events_simulated: simulation events processed by the runs the result comes from (the
            two of an extrapolation, or the full one).
        wall_time_s: host time the simulation took.
    """

    model: str
    hardware: str
    strategy: dict[str, Any]
    network: str
    feasible: bool
    reason: str
    iteration_time_s: float
    samples_per_s: float
    tokens_per_s: float
    model_flops_utilisation: float
    hardware_flops_utilisation: float
    num_microbatches: int
    simulated_microbatches: int
    extrapolated: bool
    replicas_simulated: int
    stages: tuple[StageReport, ...]
    resources: tuple[ResourceUsage, ...]
    traffic_bytes: dict[str, float]
    events_simulated: int
    wall_time_s: float

    @property
    def peak_memory_bytes(self) -> float:
        """The largest per-device memory over stages."""
        return max((s.memory_bytes for s in self.stages), default=0.0)

    @property
    def bubble_fraction(self) -> float:
        """Mean over stages of bubble time / iteration time (0 when infeasible)."""
        if not self.stages or self.iteration_time_s <= 0:
            return 0.0
        return sum(s.bubble_s for s in self.stages) / len(self.stages) / self.iteration_time_s

    def to_dict(self) -> dict[str, Any]:
        """A dict of plain JSON types, led by ``schema_version`` (:data:`SCHEMA_VERSION`)."""
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}

    def to_json(self, indent: int | None = 2) -> str:
        """The result as a strict JSON document (RFC 8259: no NaN or infinity).

        Raises:
            ValueError: a field is not finite (a bug: every quantity of a result is).
        """
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)
