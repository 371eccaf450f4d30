"""The Mixture-of-Experts targets of palm-search issue 35, measured (benchmarks, not timed tests).

* **DeepSeek-V3 on 1,024 H100s** (``h100-cluster``): the parallelism of its technical report
  (arXiv 2412.19437, §3.2: 16-way pipeline, 64-way expert parallelism, ZeRO-1 data parallelism;
  2,048 H800s there, DP 64 on these 1,024 GPUs), FP8, 1F1B in place of its DualPipe, microbatch 1
  and the preset's batch of 15,360 sequences (240 microbatches per replica), full recompute
  (the report's selective recomputation of RMSNorm and the MLA up-projections is not a choice
  here; without recompute a stage needs 114 GiB). In each of ``--processes`` fresh processes:
  the CPU time of the first ``simulate`` (which builds the machine's flows: 64-wide all-to-alls
  on 16 stages) and the median of ``--repeat`` more; printed as the least and the median over
  the processes (this shared host's speed changes by up to 2x within minutes). Target: <= 50 ms
  (the median).
* **``palm-search optimize --model Qwen3-30B-A3B --hw h100-cluster``** on ``--jobs`` 2: its
  wall-clock time within ``--timeout`` (target <= 60 s), whether its answer uses expert
  parallelism, and its tokens/s per GPU against the published mapping's simulated figure
  (Megatron-Bridge 26.04.01, DGX-H100, Qwen3-30B-A3B: 16 GPUs, FP8, TP 1 / PP 1 / EP 16, MBS 1,
  GBS 1,024; ``studies/validation/megatron-bridge/h100-moe``, line 248, simulated as
  ``palm-search validate`` does). Then the same search on the published mapping's 16 GPUs at
  its FP8 scaling recipe and batch (``studies/qwen3-30b-a3b-16-h100.toml``), which compares like
  with like (the default search runs the default fp16).

Usage: ``python benchmarks/moe_targets.py [--processes N] [--repeat N] [--timeout S]
[--skip-like-for-like] [--skip-search]``.

Measured on this shared 2-core host (load average 3-5 from other sessions), before and after the
speed work of branch ``moespeed`` (the figures printed unchanged):

* DeepSeek-V3's first simulation: 97 ms CPU before in this benchmark's single process; over 9
  fresh processes each, interleaved, least 71-97 / median 86-111 ms before and 36-40 / 44-56 ms
  after; callgrind counts 390 -> 212 million instructions for it. Its 16 stages are one
  placement moved by whole nodes: stage 0's flows are routed and the others' moved
  (``Topology.resource_shift``), and so are the sends between stages. Again: 17 ms, as before.
  Then, before and after branch ``first`` (each stage's passes planned once per run, trains
  forgotten without an event of their own, the phases two plans can meet paired once per run):
  callgrind with numpy's BLAS on one thread (as ``simulator_instructions.py`` counts) 206.5 ->
  203.8 M instructions for the first simulation, 67.3 -> 64.4 M again; CPU, two interleaved
  rounds of 4 processes each (load average 1.4-2.5), median first 48.3 / 46.1 ms before and
  53.4 / 37.7 ms after, again 18.0 / 15.4 and 16.2 / 15.6 ms: the host's speed decides whether
  the median meets 50 ms. Then, before and after branch ``speed`` (the sharing constraints by
  numpy over all (flow, resource) pairs at once, those pairs shared with the flow index, the
  event run's small costs): callgrind 204.2 -> 152.2 M instructions for the first simulation,
  64.4 -> 62.7 M again; CPU over 5 fresh processes each, before and after interleaved on a host
  at load average 8-10, first 54.8 / 58.5 ms (least / median) -> 33.3 / 47.1 ms, again 23.0 ->
  20.1 ms (medians).
* The Qwen3-30B-A3B search: its memory pre-screen (1,825 sets of degrees, 109,285 checks)
  211 s -> about 35 s CPU, the same 364,064 of 398,046 plans fitting: a check builds each
  stage's memory (``build_stage_memory``) from its units, kept across plans by the strategy
  fields they read, without the stages' times. The whole run 626 s -> 136-186 s wall, still
  missing 60 s: its 300 trials take about 60 s on 2 workers after the pre-screen. It chooses
  as before (TP 2 / PP 4 / DP 16 / CP 8 / EP 4, 7,815 tokens/s per GPU); on the published 16
  GPUs 123 -> 91 s, the same DP 16 / ZeRO-3 answer (18,065 tokens/s per GPU).
  Then, before and after branch ``qwenspeed``, ``optimize --model Qwen3-30B-A3B --hw
  h100-cluster --jobs 2`` measured back to back (``/usr/bin/time``, the workers' CPU included,
  load average from ``/proc/loadavg``): before 207 s wall / 177 s CPU (load 2.4-4.9), 192 / 188
  (3.6-3.8), 166 / 175 (1.2-5.5); after 78 / 89 (2.4-2.7), 99 / 96 (3.2-3.8), 56 / 91 (0.9-1.3),
  134 / 94 (5.5-6.4). The 60 s target is met on a quiet host only. What went: the space's
  fitting plans (364,064) are over the screen's 40,000, which the run learnt only after walking
  40,000 plans and estimating them on the workers (now known from the pre-screen, unwalked);
  the pictures deep-copied all 300 trials each time they read one; the pre-screen (30-37 ->
  25-30 s of CPU in one process, the same 109,285 checks) keeps a plan's split and memory for
  plans that differ only in schedule or ZeRO, builds only the MoE layer (Qwen3's layers are all
  MoE; an unused dense one was built), and runs on the workers. What is left: the 300 trials,
  33-53 s (TPE's proposals in the driver, about 0.1 s each, beside 0.1-0.2 s simulations), the
  pre-screen's 25-30 s of CPU on two workers, 3-6 s of pictures. The answer is unchanged (TP 2 /
  PP 4 / DP 16 / CP 8 / EP 4, 1,954 samples/s), and so is the 16-GPU search's.
  Then, with FlashAttention-2's backward at its own rate on H100 (``h100-cluster``'s
  ``fused_attention_backward_efficiency``; the balanced partition moves, so 364,088 plans fit
  after 109,201 checks): 52.3 and 52.8 s wall, 80 s of CPU, at load 1.0-1.6; TPE then finds TP
  1 / PP 8 / DP 8 / CP 16 / EP 2, ZB-H1, microbatch 8 (2,187 samples/s, 8,748 tokens/s per
  GPU, 1.03x the published mapping simulated at fp16); the 16-GPU search 17 s, DP 16 / ZeRO-3 /
  microbatch 8 / full recompute (17,503 tokens/s per GPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SIMULATE_S = 0.050
TARGET_OPTIMIZE_S = 60.0
MOE_ROWS = Path(__file__).parent.parent / "studies" / "validation" / "megatron-bridge" / "h100-moe" / "data.csv"
PUBLISHED = ("26.04.01", 248)
"""The published Qwen3-30B-A3B mapping: (release, line) in the suite's data."""


def _deepseek():  # noqa: ANN202 - (model, hardware, strategy), imported lazily
    from simulator import Strategy, load_hardware, load_model

    strategy = Strategy(tp=1, pp=16, dp=64, ep=64, microbatch_size=1, schedule="1f1b", zero_stage=1,
                        precision="fp8", recompute="full")
    return load_model("DeepSeek-V3"), load_hardware("h100-cluster"), strategy


def child(repeat: int) -> None:
    """In a fresh process: the first simulation's CPU time, the median of ``repeat`` more."""
    from simulator import simulate

    model, hardware, strategy = _deepseek()
    started = time.process_time()
    result = simulate(model, hardware, strategy)
    first = time.process_time() - started
    again = []
    for _ in range(repeat):
        started = time.process_time()
        simulate(model, hardware, strategy)
        again.append(time.process_time() - started)
    print(json.dumps(dict(first_s=first, again_s=statistics.median(again), feasible=result.feasible,
                          tokens_per_s_per_gpu=result.tokens_per_s / strategy.num_devices,
                          mfu=result.model_flops_utilisation, replicas=result.replicas_simulated)))


def published_tokens_per_s_per_gpu(precision: str | None = None) -> tuple[float, float, str]:
    """The published Qwen3-30B-A3B row: its measured and simulated tokens/s per GPU, its mapping;
    simulated in ``precision`` (FP8's scaling recipe the row's only in FP8) if given."""
    import pandas as pd

    from palm_search.commands.validate import megatron_bridge_moe_row

    frame = pd.read_csv(MOE_ROWS, dtype={"version": str})
    record = frame[(frame.version == PUBLISHED[0]) & (frame.line == PUBLISHED[1])].to_dict(orient="records")[0]
    if precision is not None and precision != record["precision"]:
        record = {**record, "precision": precision, "fp8_recipe": record["fp8_recipe"] if precision == "fp8" else None}
    row = megatron_bridge_moe_row({**record, "suite": "megatron-bridge-h100-moe"})
    return row.published, row.predicted, row.chosen


LIKE_FOR_LIKE = Path(__file__).parent.parent / "studies" / "qwen3-30b-a3b-16-h100.toml"
"""The search on the published mapping's 16 GPUs at its precision, scaling recipe and batch."""


def optimize(timeout_s: float, jobs: int, like_for_like: bool) -> dict | None:
    """Run the search (the default one, or :data:`LIKE_FOR_LIKE`) in a subprocess; its wall time
    (s) and best result, or None past ``timeout_s``."""
    with tempfile.TemporaryDirectory() as scratch:
        command = [sys.executable, "-m", "palm_search", "optimize", "--run-dir", f"{scratch}/run", "--jobs",
                   str(jobs), "--json"]
        command += ["--study", str(LIKE_FOR_LIKE)] if like_for_like else ["--model", "Qwen3-30B-A3B", "--hw",
                                                                          "h100-cluster"]
        started = time.monotonic()
        try:
            subprocess.run(command, check=True, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        spent = time.monotonic() - started
        best = json.loads((Path(scratch) / "run" / "best.json").read_text())
    return dict(wall_s=spent, strategy=best["strategy"], result=best["result"])


def _mapping(strategy: dict) -> str:
    """``tp=.. pp=.. dp=.. ep=..`` and the rest that differs from the defaults."""
    keys = ("tp", "pp", "dp", "cp", "ep", "etp", "microbatch_size", "schedule", "num_chunks", "recompute",
            "sequence_parallel", "zero_stage", "precision")
    return " ".join(f"{k}={strategy[k]}" for k in keys if strategy.get(k) is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5, help="Fresh processes timing the first simulation.")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--timeout", type=float, default=600.0, help="Wall-clock budget of each search (s).")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--skip-like-for-like", action="store_true", help="Skip the search on the published 16 GPUs.")
    parser.add_argument("--skip-search", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.repeat)
        return
    rows = [json.loads(subprocess.run([sys.executable, __file__, "--child", "--repeat", str(args.repeat)],
                                      check=True, capture_output=True, text=True).stdout)
            for _ in range(args.processes)]
    row, first = rows[0], sorted(r["first_s"] for r in rows)
    median = statistics.median(first)
    verdict = "meets" if median <= TARGET_SIMULATE_S else "misses"
    print(f"DeepSeek-V3 PP 16 / DP 64 / EP 64 on 1,024 H100: first simulation {first[0] * 1e3:.1f} ms CPU least,"
          f" {median * 1e3:.1f} ms median over {len(rows)} processes; again"
          f" {statistics.median(r['again_s'] for r in rows) * 1e3:.1f} ms (median);"
          f" {row['tokens_per_s_per_gpu']:.0f} tokens/s per GPU, MFU {row['mfu']:.1%}, replicas simulated"
          f" {row['replicas']}; first {verdict} the {TARGET_SIMULATE_S * 1e3:.0f} ms target")
    if args.skip_search:
        return
    measured, simulated, chosen = published_tokens_per_s_per_gpu()
    print(f"published Qwen3-30B-A3B mapping ({chosen}): measured {measured:.0f}, simulated {simulated:.0f}"
          " tokens/s per GPU")
    for like in [False, *([] if args.skip_like_for_like else [True])]:
        name = (f"optimize --study {LIKE_FOR_LIKE.relative_to(LIKE_FOR_LIKE.parent.parent)}" if like
                else "optimize --model Qwen3-30B-A3B --hw h100-cluster")
        run = optimize(args.timeout, args.jobs, like)
        if run is None:
            print(f"{name}: not finished in {args.timeout:.0f} s on {args.jobs} workers; misses the"
                  f" {TARGET_OPTIMIZE_S:.0f} s target")
            continue
        strategy, result = run["strategy"], run["result"]
        gpus = strategy["tp"] * strategy["pp"] * strategy["dp"] * strategy["cp"]
        per_gpu = result["tokens_per_s"] / gpus
        verdict = "meets" if run["wall_s"] <= TARGET_OPTIMIZE_S else "misses"
        expert = "proposed" if strategy["ep"] > 1 else "not chosen"
        same = published_tokens_per_s_per_gpu(strategy["precision"])[1]
        print(f"{name}: {run['wall_s']:.0f} s wall ({verdict} the {TARGET_OPTIMIZE_S:.0f} s target); best"
              f" {_mapping(strategy)} on {gpus} GPUs: {per_gpu:.0f} tokens/s per GPU, {per_gpu / simulated:.2f}x the"
              f" published mapping's simulated, {per_gpu / same:.2f}x that mapping simulated in"
              f" {strategy['precision']} ({same:.0f}); expert parallelism {expert}")


if __name__ == "__main__":
    main()
