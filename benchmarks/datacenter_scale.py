"""Simulator CPU time per configuration on datacenter-scale GPU clusters (palm-search issue 37).

Model: Llama 3.1 405B's shapes (``benchmarks/models/llama-3.1-405b.toml``: 126 layers, h 16384,
128 heads, 8 KV heads, ffn 53248, vocab 128256, sequence 8192) on ``h100-cluster`` grown to the
number of GPUs, at TP 8 / PP 16 (Dubey et al. 2024, Table 4: 16,384 H100s at TP 8 / CP 1 / PP 16
/ DP 128), 1F1B, full recompute, sequence parallelism, ZeRO-1, microbatch 1 and 16 microbatches
per replica (Meta's 16M-token batch of 2,048 sequences at DP 128), under the default network
(``sharing``).

* **First simulation**: each machine size in a fresh process (``time.process_time`` around the
  first ``simulate``, which builds the machine's topology and flows, then the median of
  ``--repeat`` more), at 16,384 GPUs (DP 128) and 131,072 (DP 1,024). Target: <= 20 ms each.
* **Cost against DP**: DP 8 (1,024 GPUs) and DP 2,048 (262,144 GPUs) in one process, their
  first simulations then ``--repeat`` rounds alternating the two, reported as the ratio of the
  medians (a ratio in one run, which the shared host's changing speed spares). Target: <= 1.2.
* **Screen rate**: CPU time per point of the default search's screen (T-145B on the wafer: the
  walk of its space, memory pre-screen included; each set of degrees walked again by the
  odometer, a build per point, and as the product of its plans and layouts; and the closed-form
  estimate of every point in the screen's tasks, :func:`palm_search.search.screen._chunks`, by a
  call per point as the screen did and vectorised, :func:`simulator.estimate_many`), each task
  then estimated again at once (its placements' flows and plans' costs all built: a lower bound
  of a point's cost in a space whose points far outnumber its placements and plans), each kind
  in a fresh process, as ratios; and the time a space of 10^6 points would take on 2 cores at
  the space's own mix and at that lower bound. Target: <= 60 s.

Measured for the first simulation, before and after branch ``first`` (each stage's passes
planned once per run, trains forgotten without an event of their own, the phases two plans can
meet paired once per run; results unchanged): callgrind (``simulator_instructions.py``, the
DP 128 case) 137.3 -> 133.7 M instructions for the first simulation and 91.3 -> 88.0 M again;
CPU over 5 interleaved fresh processes each (load average 1-3), DP 128: first 31.0 / 34.7 ms
(least / median) -> 29.8 / 31.4 ms, again 22.8 / 25.4 -> 22.2 / 25.1 ms; DP 1,024: first
39.7 / 51.8 -> 46.2 / 52.0 ms, again 24.9 / 28.4 -> 27.9 / 31.7 ms (the host's noise). The 20
ms target is missed: the event run alone is about 88 M instructions (2,000 SimPy steps), the
build of a first simulation (stage costs, placement, flows, the sharing structure) some 45 M
more.

Usage: ``python benchmarks/datacenter_scale.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODEL_FILE = Path(__file__).parent / "models" / "llama-3.1-405b.toml"
GPUS_PER_NODE = 8
MICROBATCHES = 16
"""Microbatches per replica: Meta's 2,048 sequences over DP 128."""
FIRST_CASES = (128, 1024)
"""Data-parallel degrees of the first-simulation cases (16,384 and 131,072 GPUs at TP 8 / PP 16)."""
DP_CASES = (8, 2048)
"""Data-parallel degrees compared for the cost against DP."""
TARGET_FIRST_S = 0.020
TARGET_DP_RATIO = 1.2
TARGET_MILLION_S = 60.0


def _case(dp: int):  # noqa: ANN202 - (model, hardware, strategy), imported lazily
    from simulator import Strategy, load_hardware, load_model

    base = load_hardware("h100-cluster")
    nodes = 8 * 16 * dp // GPUS_PER_NODE
    hardware = dataclasses.replace(base, name=f"h100-cluster-{nodes * GPUS_PER_NODE}",
                                   network=dataclasses.replace(base.network, nodes=nodes))
    strategy = Strategy(tp=8, pp=16, dp=dp, microbatch_size=1, global_batch_size=MICROBATCHES * dp,
                        recompute="full", sequence_parallel=True, zero_stage=1, schedule="1f1b")
    return load_model(MODEL_FILE), hardware, strategy


def _timed(dp: int) -> tuple[float, dict]:
    """CPU time (s) of one simulation of the DP ``dp`` case, and its result's headline."""
    from simulator import simulate

    model, hardware, strategy = _case(dp)
    started = time.process_time()
    result = simulate(model, hardware, strategy)
    spent = time.process_time() - started
    return spent, dict(gpus=strategy.num_devices, dp=dp, feasible=result.feasible, samples_per_s=result.samples_per_s,
                       mfu=result.model_flops_utilisation, replicas_simulated=result.replicas_simulated)


def child(dp: int, repeat: int) -> None:
    """In a fresh process: the first simulation's CPU time, then the median of ``repeat`` more."""
    first, row = _timed(dp)
    again = statistics.median(_timed(dp)[0] for _ in range(repeat))
    print(json.dumps(dict(row, first_s=first, again_s=again)))


def dp_ratio(repeat: int) -> dict:
    """The cost of DP 2,048 over DP 8, first simulations and medians of alternating rounds."""
    firsts = {dp: _timed(dp)[0] for dp in DP_CASES}
    times: dict[int, list[float]] = {dp: [] for dp in DP_CASES}
    for _ in range(repeat):
        for dp in DP_CASES:
            times[dp].append(_timed(dp)[0])
    small, large = DP_CASES
    return dict(first_ratio=firsts[large] / firsts[small],
                ratio=statistics.median(times[large]) / statistics.median(times[small]),
                **{f"dp{dp}_s": statistics.median(times[dp]) for dp in DP_CASES})


def _per_point(model, task) -> list[float]:  # noqa: ANN001 - the screen's former task: a call per point
    from simulator import InputError, estimate_samples_per_s

    values = []
    for hardware, strategy in task:
        try:
            values.append(estimate_samples_per_s(model, hardware, strategy))
        except InputError:
            values.append(0.0)
    return values


def screen_child(kind: str) -> None:
    """In a fresh process: CPU s per point of walking the default space (memory pre-screen
    included), of walking each set of degrees again by the odometer and as the product of plans
    and layouts, and of estimating the points in the screen's tasks (``kind`` ``per-point``: a
    call per point, ``vectorised``: :func:`palm_search.search.evaluate.estimate_points`), each
    task then estimated again at once (all built)."""
    from dataclasses import replace

    from palm_search.search.evaluate import estimate_points
    from palm_search.search.screen import _chunks
    from palm_search.search.space import DegreeWalk, SpaceBuilder, walk_layouts, walk_space
    from palm_search.search.study import StudySpec
    from simulator import load_hardware, load_model
    from spaces import plans_tree

    spec = StudySpec(model="T-145B", hardware="wafer")
    model, hardware = load_model(spec.model), load_hardware(spec.hardware)
    started = time.process_time()
    walk = DegreeWalk(spec, model, hardware)
    points = list(walk)
    walked = time.process_time() - started
    rounds = {"odometer": 0.0, "product": 0.0}
    for degrees, found in zip(walk.degrees, walk.found, strict=True):
        build = SpaceBuilder(space=replace(walk.space, plans=plans_tree([found]), degree_choices=(degrees,)),
                             hardware=hardware, fixed=walk.fixed)
        for name, walker in (("odometer", walk_space), ("product", walk_layouts)):
            started = time.process_time()
            if found.fitting:
                list(walker(build))
            rounds[name] += time.process_time() - started
    tasks = [[(c.hardware, c.strategy) for _, _, c in chunk]
             for chunk in _chunks((i, params, c) for i, (params, c) in enumerate(points))]
    estimate = _per_point if kind == "per-point" else estimate_points
    estimates = [0.0, 0.0]
    for task in tasks:
        for k in range(2):
            started = time.process_time()
            estimate(model, task)
            estimates[k] += time.process_time() - started
    n = len(points)
    print(json.dumps(dict(points=n, walk_s=walked / n, odometer_s=rounds["odometer"] / n,
                          product_s=rounds["product"] / n, first_s=estimates[0] / n, again_s=estimates[1] / n)))


def screen_rates() -> dict[str, dict]:
    """:func:`screen_child`'s figures for both kinds, each in a fresh process, one after the other."""
    return {kind: json.loads(subprocess.run([sys.executable, __file__, "--screen", kind], check=True,
                                            capture_output=True, text=True).stdout)
            for kind in ("per-point", "vectorised")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--screen", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.screen is not None:
        screen_child(args.screen)
        return
    if args.child is not None:
        child(args.child, args.repeat)
        return
    for dp in FIRST_CASES:
        out = subprocess.run([sys.executable, __file__, "--child", str(dp), "--repeat", str(args.repeat)],
                             check=True, capture_output=True, text=True).stdout
        row = json.loads(out)
        verdict = "meets" if row["first_s"] <= TARGET_FIRST_S else "misses"
        print(f"Llama-3.1-405B TP 8 / PP 16 / DP {dp:,} on {row['gpus']:,} H100: first simulation "
              f"{row['first_s'] * 1e3:.1f} ms CPU, again {row['again_s'] * 1e3:.1f} ms (median); "
              f"{row['samples_per_s']:.1f} samples/s, MFU {row['mfu']:.1%}, replicas simulated "
              f"{row['replicas_simulated']} of {dp:,}; {verdict} the {TARGET_FIRST_S * 1e3:.0f} ms target")
    ratio = dp_ratio(args.repeat)
    verdict = "meets" if ratio["ratio"] <= TARGET_DP_RATIO else "misses"
    print(f"cost at DP {DP_CASES[1]:,} over DP {DP_CASES[0]}: {ratio['ratio']:.2f}x (medians "
          f"{ratio[f'dp{DP_CASES[1]}_s'] * 1e3:.1f} / {ratio[f'dp{DP_CASES[0]}_s'] * 1e3:.1f} ms), first simulations "
          f"{ratio['first_ratio']:.2f}x; {verdict} the {TARGET_DP_RATIO}x target")
    rates = screen_rates()
    old, new = rates["per-point"], rates["vectorised"]
    print(f"screen of the default space ({new['points']:,} points), CPU per point: walk {new['walk_s'] * 1e6:.0f} us"
          f" (memory pre-screen included); a set of degrees walked again: odometer {new['odometer_s'] * 1e6:.0f} us,"
          f" product of plans and layouts {new['product_s'] * 1e6:.0f} us"
          f" ({new['odometer_s'] / new['product_s']:.1f}x);"
          f" estimate, a call per point {old['first_s'] * 1e6:.0f} us, vectorised {new['first_s'] * 1e6:.0f} us"
          f" ({old['first_s'] / new['first_s']:.1f}x), a task again at once (all built) {old['again_s'] * 1e6:.0f}"
          f" and {new['again_s'] * 1e6:.0f} us ({old['again_s'] / new['again_s']:.1f}x)")
    mixed_s = 1e6 * (new["walk_s"] + new["first_s"]) / 2
    built_s = 1e6 * (new["product_s"] + new["again_s"]) / 2
    verdicts = ["meets" if t <= TARGET_MILLION_S else "misses" for t in (mixed_s, built_s)]
    print(f"10^6 points on 2 cores at the vectorised rates: {mixed_s:,.0f} s at the default space's mix (walk,"
          f" pre-screen and first estimates: {verdicts[0]} the {TARGET_MILLION_S:.0f} s target), {built_s:,.0f} s"
          f" where points far outnumber plans and placements (product walk, estimates all built: {verdicts[1]} it)")


if __name__ == "__main__":
    main()
