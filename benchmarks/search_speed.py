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
builds again, and the host's slowdown of each core when both are busy). It also prints the summed
wall time of the simulations both runs make (the same strategies, each timed by the simulator) in
the 2-job run over the 1-job run's: the host's slowdown, plus the caches a worker builds for a
strategy the other worker screened, plus the moments the driver took a core.

The machine's own ceiling is measured in every round, next to the pair: a fixed piece of the
search's work (the estimates of the walk's first :data:`CEILING_POINTS` points, then the
simulations of the best :data:`CEILING_SIMULATIONS`) in one process alone, then in two processes
at once (no driver, pool or pickling: nothing a search adds). One copy's wall time over the
slower copy's is the parallel efficiency two cores of this machine give this work at that
moment; no search on them can do better.

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
        attach_artifacts(search.study, search.storage, search.model, search.hardware, spec.network, Path(run_dir),
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


CEILING_POINTS = 800
"""Points of the default walk each copy of the ceiling's work estimates."""
CEILING_SIMULATIONS = 3
"""Best estimated points each copy then simulates."""


def copy_of_work() -> dict:
    """Wall and CPU time (s) of the ceiling's work in this process (the walk not counted)."""
    from itertools import islice

    from palm_search.search.evaluate import estimate_points, evaluate
    from palm_search.search.space import DegreeWalk
    from palm_search.search.study import StudySpec
    from simulator import load_hardware, load_model

    spec = StudySpec(model="T-145B", hardware="wafer")
    model, hardware = load_model(spec.model), load_hardware(spec.hardware)
    plans = [(c.hardware, c.strategy) for _, c in islice(iter(DegreeWalk(spec, model, hardware)), CEILING_POINTS)]
    started, cpu_started = time.perf_counter(), time.process_time()
    values = estimate_points(model, plans)
    for i in sorted(range(len(plans)), key=lambda i: -values[i])[:CEILING_SIMULATIONS]:
        evaluate(model, *plans[i], spec.network)
    return {"wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu_started}


def copies_at_once(count: int) -> list[dict]:
    """:func:`copy_of_work` in ``count`` new Python processes started together."""
    processes = [subprocess.Popen([sys.executable, __file__, "--copy"], stdout=subprocess.PIPE, text=True)
                 for _ in range(count)]
    return [json.loads(process.communicate()[0].strip().splitlines()[-1]) for process in processes]


def ceiling() -> dict:
    """The parallel efficiency of two copies of the work at once (one's wall time over the slower
    copy's) and their CPU time over one copy's alone."""
    [alone], two = copies_at_once(1), copies_at_once(2)
    return {"efficiency": alone["wall_s"] / max(c["wall_s"] for c in two),
            "cpu_ratio": statistics.mean(c["cpu_s"] for c in two) / alone["cpu_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each --jobs, alternating")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a single run, printed as JSON
    parser.add_argument("--copy", action="store_true", help=argparse.SUPPRESS)  # one copy of the ceiling's work
    args = parser.parse_args()
    if args.one or args.copy:
        print(json.dumps(timed_run(args.one) if args.one else copy_of_work()))
        return
    runs: dict[int, list[dict]] = {1: [], 2: []}
    ceilings = []
    for _ in range(args.repeats):
        for jobs in (1, 2):
            runs[jobs].append(in_fresh_process(jobs))
        ceilings.append(ceiling())
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
    print_ceiling(ceilings, paired)


def print_ceiling(ceilings: list[dict], paired: list[float]) -> None:
    """The machine's ceiling in each round, and each pair's efficiency over it."""
    relative = [e / c["efficiency"] for e, c in zip(paired, ceilings, strict=True)]
    print(f"the machine's ceiling: two copies of the same work at once ({CEILING_POINTS} estimates and "
          f"{CEILING_SIMULATIONS} simulations each, no search) ran at "
          f"{statistics.median(c['efficiency'] for c in ceilings):.0%} parallel efficiency, median of the rounds ("
          + ", ".join(f"{c['efficiency']:.0%}" for c in ceilings) + "), each copy taking "
          f"{statistics.median(c['cpu_ratio'] for c in ceilings):.2f}x the CPU time of one alone; the search's "
          f"efficiency over its round's ceiling: {statistics.median(relative):.0%} median ("
          + ", ".join(f"{r:.0%}" for r in relative) + ")")

if __name__ == "__main__":
    main()
