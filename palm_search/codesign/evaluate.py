"""What a worker does with one chip: cost it, screen its mappings, and simulate the best of them.

Two rungs of successive halving (Jamieson and Talwalkar, AISTATS 2016) nested over hardware and
mapping:

* :func:`screen_chip` (every chip of the space): the chip's area and power
  (:mod:`simulator.hardware.silicon`); over a budget it is infeasible, with the reason. Otherwise,
  for each model, every mapping of the study's mapping space that fits memory is estimated in
  closed form (:func:`simulator.estimate_samples_per_s`, the screen of ``optimize``) and the
  ``refine`` best are kept.
* :func:`simulate_mapping` (the kept mappings of the best chips): the event-driven simulation.

Both return small picklable records and never raise: a failing chip is infeasible with the error
as its reason, so it never stops a search.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from functools import cache

from palm_search.codesign.spec import CodesignSpec
from palm_search.search.evaluate import evaluate
from palm_search.search.space import candidate_builder, enumerate_candidates
from simulator import Hardware, InputError, ModelSpec, Strategy, estimate_samples_per_s, load_hardware, load_model
from simulator.hardware import SiliconCost, Technology, hardware_cost, load_technology
from spaces.hardware import HardwareSpace, build_hardware

MAPPING_LIMIT = 20_000
"""Most mappings estimated per model and chip (the ``optimize`` screen's limit)."""


@dataclass(frozen=True, slots=True)
class ChipScreen:
    """A chip after the first rung.

    Attributes:
        params: the hardware point (``hw.*`` parameters).
        area_m2, power_W: the chip's area (m^2) and full-activity power (W).
        reason: why the chip is infeasible ("" when feasible).
        estimates: model -> best estimated samples/s on the chip.
        shortlist: model -> the strategies (``Strategy.to_dict``) of its best-estimated mappings.
        mappings: mappings estimated, all models.
        seconds: wall time of the screen (s).
    """

    params: dict
    area_m2: float
    power_W: float
    reason: str = ""
    estimates: dict[str, float] = field(default_factory=dict)
    shortlist: dict[str, list[dict]] = field(default_factory=dict)
    mappings: int = 0
    seconds: float = 0.0

    @property
    def samples_per_s(self) -> float:
        """Mean over the models of the best estimated samples/s (PHAZE's score); 0 if infeasible."""
        return sum(self.estimates.values()) / len(self.estimates) if self.estimates and not self.reason else 0.0


def objective_values(spec: CodesignSpec, samples_per_s: float, screen: ChipScreen) -> list[float]:
    """The study's objective(s) of a chip scoring ``samples_per_s`` (samples/s, per m^2 or per W;
    with area (m^2) or power (W) second on a front)."""
    return {
        "throughput": [samples_per_s],
        "throughput_per_area": [samples_per_s / screen.area_m2 if screen.area_m2 else 0.0],
        "throughput_per_power": [samples_per_s / screen.power_W if screen.power_W else 0.0],
        "pareto_area": [samples_per_s, screen.area_m2],
        "pareto_power": [samples_per_s, screen.power_W],
    }[spec.objective]


@cache
def _model(name: str) -> ModelSpec:
    return load_model(name)


@cache
def _base(name: str) -> Hardware:
    return load_hardware(name)


@cache
def _technology(name: str) -> Technology:
    return load_technology(name)


def chip_space(spec: CodesignSpec) -> HardwareSpace:
    """The study's hardware space around its base chip.

    Raises:
        InputError: an unreadable base chip or a bad dimension.
    """
    return HardwareSpace(_base(spec.hardware), dict(spec.hardware_choices))


def chip_cost(spec: CodesignSpec, hardware: Hardware) -> SiliconCost:
    """Area and power of a chip under the study's technology."""
    return hardware_cost(hardware, _technology(spec.technology))


def budgets(spec: CodesignSpec) -> tuple[float, float]:
    """The area (m^2) and power (W) budgets: the study's, or else the base chip's own."""
    base = chip_cost(spec, _base(spec.hardware))
    return spec.area_budget_m2 or base.area_m2, spec.power_budget_W or base.power_W


def simulated_samples_per_s(record: dict) -> float:
    """Samples/s of an evaluation record (0 when infeasible or failed)."""
    return record.get("samples_per_s", 0.0) if record.get("feasible") else 0.0


def _costed(spec: CodesignSpec, params: dict, budgeted: bool) -> tuple[Hardware, SiliconCost] | ChipScreen:
    """The chip of ``params`` and its cost, or its infeasible screen when it cannot be built or
    (if ``budgeted``) is over a budget: the analytic constraints, microseconds."""
    try:
        hardware = build_hardware(chip_space(spec), params)
    except InputError as error:
        return ChipScreen(params, 0.0, 0.0, reason=str(error))
    cost = chip_cost(spec, hardware)
    over = _over_budget(cost, *budgets(spec)) if budgeted else ""
    return ChipScreen(params, cost.area_m2, cost.power_W, reason=over) if over else (hardware, cost)


def costed_out(spec: CodesignSpec, params: dict) -> ChipScreen | None:
    """The chip of ``params`` as infeasible when it cannot be built or is over a budget (no
    mapping screened), else None."""
    costed = _costed(spec, params, budgeted=True)
    return costed if isinstance(costed, ChipScreen) else None


def screen_chip(spec: CodesignSpec, params: dict, budgeted: bool = True) -> ChipScreen:
    """The first rung for the chip of ``params`` (module docstring), its budgets checked unless
    not ``budgeted`` (the base chip, screened as the reference); never raises."""
    started = time.perf_counter()
    costed = _costed(spec, params, budgeted)
    if isinstance(costed, ChipScreen):
        return costed
    hardware, cost = costed
    estimates, shortlist, mappings = {}, {}, 0
    try:
        for name in spec.models:
            best, kept, count = _screen_model(spec, name, hardware)
            mappings += count
            if not kept:
                return ChipScreen(params, cost.area_m2, cost.power_W, reason=f"{name}: no mapping fits",
                                  mappings=mappings, seconds=time.perf_counter() - started)
            estimates[name], shortlist[name] = best, kept
    except Exception as error:  # noqa: BLE001 - a failing chip must not stop a search
        where = traceback.extract_tb(error.__traceback__)[-1]
        reason = f"{type(error).__name__}: {error} ({where.filename.rsplit('/', 1)[-1]}:{where.lineno})"
        return ChipScreen(params, cost.area_m2, cost.power_W, reason=reason, mappings=mappings)
    return ChipScreen(params, cost.area_m2, cost.power_W, estimates=estimates, shortlist=shortlist,
                      mappings=mappings, seconds=time.perf_counter() - started)


def _over_budget(cost: SiliconCost, area_budget_m2: float, power_budget_W: float) -> str:
    if cost.area_m2 > area_budget_m2 * (1 + 1e-9):
        return f"area {cost.area_m2 * 1e6:,.0f} mm^2 over the budget {area_budget_m2 * 1e6:,.0f} mm^2"
    if cost.power_W > power_budget_W * (1 + 1e-9):
        return f"power {cost.power_W:,.0f} W over the budget {power_budget_W:,.0f} W"
    return ""


def _screen_model(spec: CodesignSpec, name: str, hardware: Hardware) -> tuple[float, list[dict], int]:
    """The best estimate of model ``name`` on ``hardware``, its ``refine`` best-estimated
    strategies, and the mappings estimated (none kept: nothing fits)."""
    model = _model(name)
    strategies = _mapping_walk(spec, name, hardware)
    values = [_estimate(model, hardware, strategy) for strategy in strategies]
    order = sorted(range(len(strategies)), key=lambda i: -values[i])
    kept = [strategies[i].to_dict() for i in order[:spec.refine] if values[i] > 0]
    return (values[order[0]] if kept else 0.0), kept, len(strategies)


def _estimate(model: ModelSpec, hardware: Hardware, strategy: Strategy) -> float:
    """Estimated samples/s (0 where the plan is not legal on this chip)."""
    try:
        return estimate_samples_per_s(model, hardware, strategy)
    except InputError:
        return 0.0


def _walk_key(spec: CodesignSpec, name: str, hardware: Hardware) -> tuple:
    """What the mapping space of model ``name`` on a chip depends on: the study's mapping
    dimensions, the chip's grid (devices, dies, placements) and its memory (which plans fit).
    SRAM, peaks and bandwidths do not change which plans are proposed (a plan they make illegal
    is estimated at 0)."""
    mesh = hardware.network
    return (repr(spec.mapping_spec(name)), mesh.dies_x, mesh.dies_y, mesh.cores_x, mesh.cores_y,  # type: ignore[attr-defined]
            mesh.wafers, hardware.device_memory_bytes())


_WALKS: dict[tuple, tuple[Strategy, ...]] = {}
"""Mapping spaces enumerated in this process, by :func:`_walk_key`."""


def _mapping_walk(spec: CodesignSpec, name: str, hardware: Hardware) -> tuple[Strategy, ...]:
    """The strategies of model ``name``'s mapping space on ``hardware``, enumerated once per
    worker process for all chips of the same :func:`_walk_key`."""
    key = _walk_key(spec, name, hardware)
    if key not in _WALKS:
        try:
            build = candidate_builder(spec.mapping_spec(name), _model(name), hardware)
            walk = enumerate_candidates(build, MAPPING_LIMIT) or []
        except InputError:
            walk = []
        _WALKS[key] = tuple(candidate.strategy for _, candidate in walk)
    return _WALKS[key]


def simulate_mapping(spec: CodesignSpec, params: dict, name: str, strategy: dict) -> dict:
    """The event-driven evaluation record (:func:`palm_search.search.evaluate.evaluate`) of
    model ``name`` mapped by ``strategy`` on the chip of ``params``; never raises."""
    try:
        hardware = build_hardware(chip_space(spec), params)
    except InputError as error:
        return {"error": str(error)}
    return evaluate(_model(name), hardware, Strategy.from_dict(strategy), spec.network)
