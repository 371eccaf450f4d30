"""Why the answer is the answer: the best mapping against the baseline, what bounds it, which
of the top mappings tie and which dimensions matter, in sentences the terminal summary, the HTML
report and the dashboard's study note share (:func:`explain`).

Every ranking here and in :mod:`.outputs` breaks ties the same way (:func:`ranked`): throughput
descending, then trial number ascending, so best.json, the report, the terminal table and
optuna-dashboard's best trial (``study.best_trial``: Optuna keeps the first trial, by number,
with the best value) name the same trial.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from simulator import is_inference, strategy_fields

if TYPE_CHECKING:  # the terminal summary imports this module; `simulate` runs without pandas
    import pandas as pd

TIE_TOLERANCE = 5e-4
"""Relative throughput difference (0.05%) under which two mappings count as tied."""
LABELS = {"tp": "TP", "pp": "PP", "dp": "DP", "cp": "CP", "microbatch_size": "microbatch", "schedule": "schedule",
          "num_chunks": "chunks", "recompute": "recompute", "sequence_parallel": "sequence parallelism",
          "zero_stage": "ZeRO stage", "shard_group_size": "ZeRO shard group", "placement": "placement",
          "group_layout": "group layout", "group_order": "group order", "wafer_stages": "stages on wafers",
          "users": "users"}
"""How a person calls each searched strategy field."""
KINDS = {"dram": "DRAM ports", "link": "links", "nic": "NICs"}
"""Resource kinds (:class:`simulator.ResourceUsage`) as a person calls them."""
SHARES = {"compute": ("computing", "compute-bound"), "dram_stall": ("stalled on DRAM", "DRAM-bound"),
          "communication": ("in exposed communication", "communication-bound"),
          "optimizer": ("updating weights", "optimizer-bound"),
          "bubble": ("idle in the pipeline bubble", "bubble-bound (pipeline fill and drain)")}
"""Time shares of an iteration (:func:`palm_search.search.evaluate.time_shares`): (what the
stage is doing, the verdict when it is the largest share)."""


def fields_of(frame: pd.DataFrame) -> list[str]:
    """The strategy fields (:func:`simulator.strategy_fields` ``column``) the frame has."""
    return [f for f in (*strategy_fields(column=True), "users") if f in frame]


def ranked(frame: pd.DataFrame, value: str = "samples_per_s") -> pd.DataFrame:
    """Feasible completed trials, ``value`` descending then trial number ascending (stable)."""
    if frame.empty or "feasible" not in frame or value not in frame:
        return frame.iloc[0:0]
    feasible = frame[(frame["state"] == "COMPLETE") & (frame["feasible"] == True)]  # noqa: E712
    return feasible.sort_values([value, "trial"], ascending=[False, True], kind="stable")


def _show(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def changes(best: dict, base: dict, names: list[str]) -> list[str]:
    """``"TP 8 -> 32"`` for each field of ``names`` whose value differs from the baseline's."""
    return [f"{LABELS.get(n, n)} {_show(base.get(n))} -> {_show(best.get(n))}" for n in names
            if _show(base.get(n)) != _show(best.get(n))]


def bottleneck(utilisation: dict | None, shares: dict | None) -> str:
    """One sentence on what bounds a mapping, from its busiest resources and its time shares."""
    if not shares:
        return ""
    largest = max(shares, key=lambda k: shares[k])
    parts = ", ".join(f"{SHARES[k][0]} {v:.0%}" for k, v in sorted(shares.items(), key=lambda kv: -kv[1])
                      if k in SHARES and v >= 0.005)
    busy = sorted((utilisation or {}).items(), key=lambda kv: -kv[1]["max"])
    resources = ""
    if busy:
        (kind, top), rest = busy[0], busy[1:]
        load = "demand (over capacity: transfers not made to share it)" if top["max"] > 1 else "busy"
        resources = f"; {KINDS.get(kind, kind)} {top['max']:.0%} {load} at the busiest" + "".join(
            f", {KINDS.get(k, k)} <= {u['max']:.0%}" for k, u in rest)
    return f"{SHARES[largest][1]}: its stages spend the iteration {parts}{resources}"


def near_ties(top: pd.DataFrame, value: str = "samples_per_s", tolerance: float = TIE_TOLERANCE) -> list[dict]:
    """Groups of consecutive ``top`` rows (ranked) within ``tolerance`` (relative) of the group's
    first; each: ``trials``, ``value`` (the first's), ``varying`` (fields whose values differ
    inside the group: those that make no difference here). Groups of one are left out."""
    names, groups, rows = fields_of(top), [], top.to_dict("records")
    i = 0
    while i < len(rows):
        lead = rows[i][value]
        j = i + 1
        while j < len(rows) and lead and (lead - rows[j][value]) / lead <= tolerance:
            j += 1
        if j - i > 1:
            members = rows[i:j]
            varying = [n for n in names if len({_show(r.get(n)) for r in members}) > 1]
            groups.append({"trials": [int(r["trial"]) for r in members], "value": float(lead), "varying": varying})
        i = j
    return groups


def effect_sizes(frame: pd.DataFrame, value: str = "samples_per_s") -> list[dict]:
    """For each strategy field with two or more values among the feasible searched trials (the
    baseline left out): the best ``value`` at each of its values and their spread,
    ``1 - lowest / highest`` (0..1), largest first. A field a 0.05% effect moves reads 0.05%."""
    trials = ranked(frame, value)
    if "baseline" in trials:
        trials = trials[trials["baseline"] != True]  # noqa: E712
    effects = []
    for name in fields_of(trials):
        column = trials[name].map(_show)
        bests = trials.groupby(column)[value].max()
        if len(bests) > 1 and bests.max() > 0:
            effects.append({"field": name, "spread": float(1 - bests.min() / bests.max()),
                            "best": {k: float(v) for k, v in bests.sort_values(ascending=False).items()}})
    return sorted(effects, key=lambda e: -e["spread"])


def explain(frame: pd.DataFrame, top: pd.DataFrame, attrs_of_best: dict, value: str = "samples_per_s") -> dict:
    """The explanation document (in the run's summary as ``explanation``): ``changes`` against
    the baseline and ``speedup``, ``bottleneck``, ``near_ties`` among ``top``, ``effects`` and
    ``effects_on`` (how many trials they are computed on)."""
    order = ranked(frame, value)
    if not len(order):
        return {}
    best = order.iloc[0].to_dict()
    base_rows = frame[frame["baseline"] == True] if "baseline" in frame else frame.iloc[0:0]  # noqa: E712
    base = base_rows.iloc[0].to_dict() if len(base_rows) else None
    names = fields_of(frame)
    speedup = (best[value] / base[value] if base and base.get("feasible") and base.get(value) else None)
    searched = len(order) - int((order.get("baseline") == True).sum())  # noqa: E712
    return {"best_trial": int(best["trial"]), "changes": changes(best, base, names) if base else [],
            "speedup": speedup,
            "bottleneck": bottleneck(attrs_of_best.get("utilisation"), attrs_of_best.get("time_shares")),
            "near_ties": near_ties(top, value) if value in top else [],
            "effects": effect_sizes(frame, value), "effects_on": searched}


def sentences(explanation: dict, unit: str = "samples/s") -> list[str]:
    """The explanation as lines of plain text (terminal, report, study note)."""
    if not explanation:
        return []
    lines = []
    if explanation.get("speedup") is not None:
        what = ", ".join(explanation["changes"]) or "nothing (the baseline is the best)"
        lines.append(f"best #{explanation['best_trial']} against the baseline: {explanation['speedup']:.3g}x;"
                     f" changed: {what}")
    if explanation.get("bottleneck"):
        lines.append(f"best #{explanation['best_trial']} is {explanation['bottleneck']}")
    for group in explanation.get("near_ties", []):
        varying = _and([LABELS.get(n, n) for n in group["varying"]])
        lines.append(f"{len(group['trials'])} mappings within {TIE_TOLERANCE:.2%} of {group['value']:.4g} {unit}"
                     f" (#{', #'.join(map(str, group['trials']))}): "
                     + (f"{varying} make{'s' if len(group['varying']) == 1 else ''} no difference here"
                        if varying else "the same mapping"))
    if explanation.get("effects"):
        lines.append(f"what matters (spread of the best {unit} over each dimension's values, over the"
                     f" {explanation['effects_on']} feasible searched trials; the value whose best is lowest): "
                     + ", ".join(f"{LABELS.get(e['field'], e['field'])} {e['spread']:.2%} ({list(e['best'])[-1]})"
                                 for e in explanation["effects"]))
    return lines


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1] if words else ""


ENCODINGS = """### What the parameters encode

The sampler's parameters are the search's internal encoding; each trial (the baseline, which has
no parameters, included) also stores the mapping by the strategy's own names as user attributes
(`tp`, `pp`, `dp`, `cp`, `microbatch_size`, `schedule`, `recompute`, `zero_stage`, `placement`,
`group_layout`, `group_order`...), with `samples_per_s`, `feasible` and `reason`.

- `degrees` `32x5x2`: TP x PP x DP (x CP under context parallelism).
- `name|key=value` (`microbatch_size|dp=2`): the dimension `name` offered with the choices that
  remain given `key` (Optuna needs one name per set of choices).
- `name|only=a,b` (`schedule|only=1f1b,zb-h1`): only those values fit memory here;
  `name|without=x` (`zero_stage|without=0`): every value but `x` does.
- `groups` `compact/tp-major`: the comm-group layout / the group order.
"""


def study_note(summary: dict) -> str:
    """The study's optuna-dashboard note (Markdown): the answer explained, then the encodings."""
    unit = "tokens/s" if is_inference(summary.get("mode")) else "samples/s"
    best = summary.get("best") or {}
    lines = [f"## {summary.get('study', '')}", ""]
    if best:
        lines.append(f"Best: trial {best['trial']} (ties broken by the lower trial number, as the dashboard's"
                     f" best trial), {best.get('samples_per_s', 0):.4g} {unit}.")
    if summary.get("devices"):
        lines.append(f"Devices: {summary['devices']}.")
    lines += [""] + [f"- {line}" for line in sentences(summary.get("explanation") or {}, unit)]
    return "\n".join(lines) + "\n\n" + ENCODINGS
