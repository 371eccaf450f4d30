"""The reference mapping every search result is compared with.

For the cases PALM studies on its wafer (§V-B, Table VII: T-18B, T-76B, T-145B) it is the
paper's mapping: TP 8 / DP 2 / PP 20, 1F1B, full recompute, Adam, FP16. Elsewhere it is a uniform
Megatron-like mapping (Narayanan et al. SC'21 §3.3 takeaways): tensor parallelism up to the
devices of one node or die, then the fewest pipeline stages that fit memory, microbatch 1, 1F1B,
full recompute. If the paper's mapping exceeds memory the lowest ZeRO stage that fits is added,
and the note says so.
"""

from __future__ import annotations

from palm_search.search.space import serving_fixed
from palm_search.search.study import StudySpec
from simulator import ZERO_STAGES, Hardware, InputError, ModelSpec, Strategy, check_memory, simulate
from spaces import canonical_placement, enumerate_degrees

PAPER_BASELINES = {
    ("T-18B", "wafer"): {"tp": 8, "dp": 2, "pp": 20, "schedule": "1f1b", "recompute": "full"},
    ("T-76B", "wafer"): {"tp": 8, "dp": 2, "pp": 20, "schedule": "1f1b", "recompute": "full"},
    ("T-145B", "wafer"): {"tp": 8, "dp": 2, "pp": 20, "schedule": "1f1b", "recompute": "full"},
}
"""PALM §V-B (Table VII) baseline mapping per (model preset, hardware preset)."""


def choose_baseline(spec: StudySpec, model: ModelSpec, hardware: Hardware) -> tuple[Strategy, str]:
    """The baseline strategy and a sentence saying where it comes from, its placement named as
    the search names it (:func:`spaces.canonical_placement`)."""
    strategy, note = _chosen(spec, model, hardware)
    return strategy.with_fields(placement=canonical_placement(hardware, strategy.placement)), note


def _chosen(spec: StudySpec, model: ModelSpec, hardware: Hardware) -> tuple[Strategy, str]:
    fixed = {k: v for k, v in spec.fixed.items() if k not in ("stage_devices", "stage_layers")}
    if spec.serving:
        return _serving_baseline(spec, model, hardware, fixed)
    if spec.baseline is not None:
        return Strategy.from_dict({**fixed, **spec.baseline}), "the study file's baseline table"
    paper = PAPER_BASELINES.get((model.name, hardware.name))
    if paper is not None:
        return _fitting_zero({**fixed, **paper}, model, hardware)
    return _megatron_like(fixed, model, hardware, spec.device_counts)


def lowest_fitting_zero(fields: dict, model: ModelSpec, hardware: Hardware) -> Strategy | None:
    """``fields`` with the lowest ZeRO stage (0-3) whose strategy fits memory, or None."""
    for zero in ZERO_STAGES:
        strategy = Strategy.from_dict({**fields, "zero_stage": zero})
        if simulate(model, hardware, strategy, network="analytical").feasible:
            return strategy
    return None


def _fitting_zero(fields: dict, model: ModelSpec, hardware: Hardware) -> tuple[Strategy, str]:
    note = "PALM §V-B mapping (TP 8 / DP 2 / PP 20, 1F1B, full recompute)"
    strategy = lowest_fitting_zero(fields, model, hardware)
    if strategy is None:
        return Strategy.from_dict(fields), f"{note}; over memory even with ZeRO-3"
    zero = strategy.zero_stage
    return strategy, note if zero == 0 else f"{note} + ZeRO-{zero}, the lowest stage that fits memory"


def _megatron_like(fields: dict, model: ModelSpec, hardware: Hardware,
                   device_counts: tuple[int, ...]) -> tuple[Strategy, str]:
    group = hardware.network.devices_per_node
    counts = sorted(set(device_counts or [hardware.num_devices]), reverse=True)
    degrees = [d for n in counts for d in enumerate_degrees(model, hardware, devices=n)]
    if not degrees:
        raise InputError(f"baseline: no legal TP x PP x DP of {model.name} uses {_devices(counts)} of"
                         f" {hardware.name!r}; list the device counts a mapping may use in the study's"
                         " [search] `devices` (e.g. a power of two)")
    ranked = sorted(degrees, key=lambda d: (-d.tp * d.cp * d.pp * d.dp,
                                            -min(d.tp, group) if d.tp <= group else d.tp, d.pp))
    for d in ranked:
        strategy = Strategy.from_dict({**fields, "tp": d.tp, "pp": d.pp, "dp": d.dp, "schedule": "1f1b",
                                       "recompute": "full", "microbatch_size": 1})
        try:
            if simulate(model, hardware, strategy, network="analytical").feasible:
                return strategy, f"Megatron-like uniform mapping TP {d.tp} / PP {d.pp} / DP {d.dp}"
        except Exception:  # noqa: BLE001, S112 - an illegal candidate is skipped
            continue
    d = ranked[0]
    return (Strategy.from_dict({**fields, "tp": d.tp, "pp": d.pp, "dp": d.dp}),
            "Megatron-like mapping (no candidate fits memory)")


SERVING_BASELINE_USERS = 32
"""Users of the serving baseline (tt-metal's LLM table serves batch 32 on one card)."""


def _serving_baseline(spec: StudySpec, model: ModelSpec, hardware: Hardware, fixed: dict) -> tuple[Strategy, str]:
    """A serving study's reference: :data:`SERVING_BASELINE_USERS` users (or the study's users
    nearest it) as one microbatch, on the Megatron-like degrees (tensor parallel up to a node,
    then the fewest stages) that fit memory; the study file's baseline table overrides fields.

    Raises:
        InputError: no legal degrees for those users.
    """
    users = min(spec.users, key=lambda u: (abs(u - SERVING_BASELINE_USERS), u))
    fields = serving_fixed(spec, model, users)
    fields.update({k: v for k, v in fixed.items() if k in fields or k not in ("global_batch_size",)})
    group = hardware.network.devices_per_node
    counts = sorted(set(spec.device_counts or [hardware.num_devices]), reverse=True)
    degrees = [d for n in counts for d in enumerate_degrees(model, hardware, devices=n, global_batch_size=users)]
    if not degrees:
        raise InputError(f"baseline: no legal TP x PP x DP of {model.name} for {users} users uses"
                         f" {_devices(counts)} of {hardware.name!r}")
    ranked = sorted(degrees, key=lambda d: (-d.tp * d.cp * d.pp * d.dp, d.dp, -min(d.tp, group), d.pp))
    for d in ranked:
        strategy = Strategy.from_dict({**fields, "tp": d.tp, "pp": d.pp, "dp": d.dp,
                                       "microbatch_size": users // d.dp, **(spec.baseline or {})})
        if not check_memory(model, hardware, strategy):
            degrees = f"TP {strategy.tp} / PP {strategy.pp} / DP {strategy.dp}"
            return strategy, f"{users} users, Megatron-like mapping {degrees}"
    d = ranked[0]
    return (Strategy.from_dict({**fields, "tp": d.tp, "pp": d.pp, "dp": d.dp, "microbatch_size": users // d.dp}),
            f"{users} users, Megatron-like mapping (no candidate fits memory)")


def _devices(counts: list[int]) -> str:
    return " or ".join(str(n) for n in counts) + " devices"
