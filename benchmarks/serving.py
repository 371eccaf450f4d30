"""Serving speed targets of the LLM-inference issue (palm-search issue 34).

* **A decode configuration**: CPU time (``time.process_time``) of one ``simulate`` of a decode
  step, the machine's topology and flows already built (the first call on a machine builds them;
  reported apart), median of ``--repeat`` calls at contexts 129, 130, ... (each a new stage cost):
  Llama 3.1 8B on ``wormhole-n150`` over its 64 cores (attention split by users), Llama 3.1 70B on
  the 8-chip ``wormhole-quietbox`` over its 512 cores, Llama 3.1 8B on one H100. Target: <= 10 ms.
* **A serving search**: wall time of ``palm-search optimize --mode inference --model Llama-3.1-70B
  --hw wormhole-quietbox`` with both serving objectives (system tokens/s and tokens/s per user)
  under the demo's stack, in a fresh process on this machine's cores, then ``palm-search report``,
  and whether the report drew the Pareto front. Target: <= 60 s, front drawn.

Usage: ``python benchmarks/serving.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_DECODE_S = 0.010
TARGET_SEARCH_S = 60.0
STACK = "tt-transformers-performance"
CASES = (("Llama-3.1-8B", "wormhole-n150", 64, "users", "bfloat8_b", STACK),
         ("Llama-3.1-70B", "wormhole-quietbox", 512, "users", "bfloat8_b", STACK),
         ("Llama-3.1-8B", "h100-cluster", 1, "heads", "bf16", "megatron-core"))


def decode_times(repeat: int) -> None:
    from simulator import Strategy, load_hardware, load_model, load_stack, simulate

    for name, preset, tp, split, precision, stack_name in CASES:
        model, hardware, stack = load_model(name), load_hardware(preset), load_stack(stack_name)
        base = Strategy(tp=tp, microbatch_size=32, global_batch_size=32, mode="inference", precision=precision,
                        prompt_length=128, decode_context_length=129, attention_split=split)
        start = time.process_time()
        simulate(model, hardware, base, stack=stack)
        first = time.process_time() - start
        times = []
        for context in range(130, 130 + repeat):
            start = time.process_time()
            simulate(model, hardware, dataclasses.replace(base, decode_context_length=context), stack=stack)
            times.append(time.process_time() - start)
        median = statistics.median(times)
        verdict = "met" if median <= TARGET_DECODE_S else "NOT met"
        print(f"{name} on {preset} (tp {tp}, attention by {split}): a decode step {median * 1e3:.1f} ms CPU "
              f"(first on the machine {first * 1e3:.0f} ms); target <= {TARGET_DECODE_S * 1e3:.0f} ms: {verdict}")


def search_time() -> None:
    with tempfile.TemporaryDirectory() as run_dir:
        command = [sys.executable, "-m", "palm_search", "optimize", "--mode", "inference", "--model", "Llama-3.1-70B",
                   "--hw", "wormhole-quietbox", "--precision", "bfloat8_b", "--prompt-length", "128",
                   "--stack", STACK, "--objective", "throughput", "--objective", "tokens_per_s_per_user",
                   "--run-dir", run_dir]
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, text=True)
        subprocess.run([sys.executable, "-m", "palm_search", "report", run_dir], check=True, capture_output=True)
        wall = time.perf_counter() - start
        report = Path(run_dir) / "report.html"
        front = report.is_file() and "Pareto front" in report.read_text()
    verdict = "met" if wall <= TARGET_SEARCH_S and front else "NOT met"
    print(f"optimize --mode inference + report, Llama-3.1-70B on wormhole-quietbox, two objectives: {wall:.1f} s wall, "
          f"Pareto front {'drawn' if front else 'missing'}; target <= {TARGET_SEARCH_S:.0f} s: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="Decode steps timed per case (median).")
    args = parser.parse_args()
    decode_times(args.repeat)
    search_time()


if __name__ == "__main__":
    main()
