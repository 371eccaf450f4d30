"""The reference mapping every search result is compared with.

For the cases PALM studies on its wafer (§V-B, Table VII: T-18B, T-76B, T-145B) it is the
paper's mapping: TP 8 / DP 2 / PP 20, 1F1B, full recompute, Adam, FP16. Elsewhere it is a uniform
Megatron-like mapping (Narayanan et al. SC'21 §3.3 takeaways): tensor parallelism up to the
devices of one node or die, then the fewest pipeline stages that fit memory, microbatch 1, 1F1B,
full recompute. If the paper's mapping exceeds memory the lowest ZeRO stage that fits is added,
and the note says so.
"""

from __future__ import annotations

from palm_search.search.study import StudySpec
from simulator import ZERO_STAGES, Hardware, InputError, ModelSpec, Strategy, simulate
from spaces import enumerate_degrees

PAPER_BASELINES = {
    ("T-18B", "wafer"): {"tp": 8, "dp": 2, "pp": 20, "schedule": "1f1b", "recompute": "full"},
    ("T-76B", "wafer"): {"tp": 8, "dp": 2, "pp": 20, "schedule": "1f1b", "recompute": "full"},
    ("T-145B", "wafer"): {"tp": 8, "dp": 2, "pp": 20, "schedule": "1f1b", "recompute": "full"},
}
"""PALM §V-B (Table VII) baseline mapping per (model preset, hardware preset)."""


def choose_baseline(spec: StudySpec, model: ModelSpec, hardware: Hardware) -> tuple[Strategy, str]:
    """The baseline strategy and a sentence saying where it comes from."""
    fixed = {k: v for k, v in spec.fixed.items() if k not in ("stage_devices", "stage_layers")}
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


def _devices(counts: list[int]) -> str:
    return " or ".join(str(n) for n in counts) + " devices"
