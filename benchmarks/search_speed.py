"""Wall time of the default search, split into search and pictures, and ``--jobs`` scaling.

Runs what ``palm-search optimize --model T-145B --hw wafer`` runs (the screen of every point,
50 simulations, seed 0, pictures of the top 3 and the baseline) with ``--jobs 1`` and ``--jobs 2``
in fresh run directories, and prints each part's wall time and the parallel efficiency
``T1 / (2 T2)`` of the search. The two runs must find the same trials (synchronous batches);
the script checks it.

Usage: ``python benchmarks/search_speed.py``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from search_quality import searched  # benchmarks/ is the script's directory

from palm_search.search.study import StudySpec
from palm_search.views.artifacts import attach_artifacts


def timed_run(jobs: int) -> tuple[float, float, list]:
    """(search s, pictures s, the trials' parameters) of the default run on ``jobs`` workers."""
    spec = StudySpec(model="T-145B", hardware="wafer")
    with tempfile.TemporaryDirectory() as run_dir:
        started = time.perf_counter()
        search = searched(spec, Path(run_dir), jobs)
        finished = time.perf_counter()
        attach_artifacts(search.study, search.model, search.hardware, spec.network, Path(run_dir),
                         spec.artifacts_top, jobs=jobs)
        drawn = time.perf_counter()
        params = [t.params for t in search.study.trials]
    return finished - started, drawn - finished, params


def main() -> None:
    one, two = timed_run(1), timed_run(2)
    for jobs, (search_s, pictures_s, _) in ((1, one), (2, two)):
        total = search_s + pictures_s
        print(f"--jobs {jobs}: search {search_s:.1f} s, pictures {pictures_s:.1f} s, total {total:.1f} s")
    print(f"parallel efficiency of the search with 2 jobs: {one[0] / (2 * two[0]):.0%}; "
          f"same trials with 1 and 2 jobs: {one[2] == two[2]}")


if __name__ == "__main__":
    main()
