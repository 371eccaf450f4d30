"""Wall time of the default search, split into search and pictures, and ``--jobs`` scaling.

Runs what ``palm-search optimize --model T-145B --hw wafer`` runs (the screen of every point,
50 simulations, seed 0, pictures of the top 3 and the baseline) with ``--jobs 1`` and ``--jobs 2``,
each run in a fresh process (as a user's command; a process that has searched before keeps
caches and garbage that change the next run's time) and in a fresh run directory, alternating
``--repeats`` times. It prints each part's median wall time and the parallel efficiency
``T1 / (2 T2)`` of the search from the medians, and the median of each pair of runs made one
after the other (the machine's speed drifts by 10-25% between minutes; a pair shares it). The
runs must find the same trials (synchronous batches); the script checks it.

Each pair's efficiency is the product of two factors the script prints with it: how busy the
search keeps the two cores (the CPU time of the driver, its workers and loky's resource tracker
over twice the wall time; what is left is time a core waits), and the CPU time of the 1-job run
over the 2-job run's (what running on two processes adds: worker start-up, caches each worker
builds again, and the host's slowdown of each core when both are busy). To tell the last from the
others it prints the summed time of the simulations both runs make (the same strategies, each
timed by the simulator) in the 2-job run over the 1-job run's.

Usage: ``python benchmarks/search_speed.py [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed_run(jobs: int) -> dict:
    """Search and pictures wall times (s) of the default run on ``jobs`` workers, and a digest
    of its trials' parameters."""
    from search_quality import searched  # benchmarks/ is the script's directory

    from palm_search.search.study import StudySpec
    from palm_search.views.artifacts import attach_artifacts

    spec = StudySpec(model="T-145B", hardware="wafer")
    with tempfile.TemporaryDirectory() as run_dir:
        started, cpu_started = time.perf_counter(), tree_cpu_s()
        search = searched(spec, Path(run_dir), jobs)
        finished, cpu_s = time.perf_counter(), tree_cpu_s() - cpu_started
        attach_artifacts(search.study, search.model, search.hardware, spec.network, Path(run_dir),
                         spec.artifacts_top, jobs=jobs)
        drawn = time.perf_counter()
        params = json.dumps([t.params for t in search.study.trials], sort_keys=True, default=str)
        simulations_s = sum(t.user_attrs.get("wall_time_s", 0.0) for t in search.study.trials
                            if not t.user_attrs.get("cached"))
    return {"search_s": finished - started, "pictures_s": drawn - finished, "search_cpu_s": cpu_s,
            "simulations_s": simulations_s, "trials": hashlib.sha256(params.encode()).hexdigest()}


def tree_cpu_s() -> float:
    """CPU time (s, user and system) of this process and of its live descendants (the loky
    workers and resource tracker, which live on after the search for the pictures)."""
    import psutil  # a dependency of dask.distributed

    me = psutil.Process(os.getpid())
    return sum(sum(p.cpu_times()[:2]) for p in (me, *me.children(recursive=True)))


def in_fresh_process(jobs: int) -> dict:
    """:func:`timed_run` in a new Python process."""
    out = subprocess.run([sys.executable, __file__, "--one", str(jobs)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each --jobs, alternating")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a single run, printed as JSON
    args = parser.parse_args()
    if args.one:
        print(json.dumps(timed_run(args.one)))
        return
    runs: dict[int, list[dict]] = {1: [], 2: []}
    for _ in range(args.repeats):
        for jobs in (1, 2):
            runs[jobs].append(in_fresh_process(jobs))
    median = {jobs: {part: statistics.median(r[part] for r in rs) for part in ("search_s", "pictures_s")}
              for jobs, rs in runs.items()}
    for jobs, parts in median.items():
        print(f"--jobs {jobs}: search {parts['search_s']:.1f} s, pictures {parts['pictures_s']:.1f} s, total "
              f"{parts['search_s'] + parts['pictures_s']:.1f} s (median of {args.repeats}; search runs "
              + ", ".join(f"{r['search_s']:.1f}" for r in runs[jobs]) + " s)")
    same = len({r["trials"] for rs in runs.values() for r in rs}) == 1
    paired = [one["search_s"] / (2 * two["search_s"]) for one, two in zip(runs[1], runs[2], strict=True)]
    for one, two in zip(runs[1], runs[2], strict=True):
        print(f"  pair: efficiency {one['search_s'] / (2 * two['search_s']):.0%} = cores busy "
              f"{two['search_cpu_s'] / (2 * two['search_s']):.0%} (1 job: {one['search_cpu_s'] / one['search_s']:.0%})"
              f" x CPU time {one['search_cpu_s']:.1f} / {two['search_cpu_s']:.1f} s; the same simulations took"
              f" {two['simulations_s'] / one['simulations_s']:.2f}x as long with 2 jobs")
    print(f"parallel efficiency of the search with 2 jobs: {median[1]['search_s'] / (2 * median[2]['search_s']):.0%}"
          f" of the medians; {statistics.median(paired):.0%} the median of each pair of runs made one after the other ("
          + ", ".join(f"{e:.0%}" for e in paired) + f"); same trials in every run with 1 and 2 jobs: {same}")


if __name__ == "__main__":
    main()
