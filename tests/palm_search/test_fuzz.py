"""The fuzzer: bad inputs (:mod:`fuzzing`) run as real ``palm-search`` processes, two at a time.

``make test`` runs ``FUZZ_CASES = 200`` of them, ``make fuzz`` 2,000 (the same generator, a
different count). Every case must end with exit 0 and a JSON result, or exit 2 and one line; no
traceback, no hang, nothing half-written. The tally by source and outcome is printed (``-s``)
and kept in pytest's cache under ``palm_search/fuzz``.
"""

from __future__ import annotations

import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from fuzzing import BASES, Outcome, cases, optimize_case, run, simulate_case, to_toml, verdict
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

FUZZ_CASES = int(os.environ.get("FUZZ_CASES", "200"))
BATCH = 8
"""Cases per hypothesis example, run on two processes at a time."""
tally: Counter[tuple[str, str]] = Counter()


@pytest.mark.slow
@settings(max_examples=max(FUZZ_CASES // BATCH, 1), deadline=None, derandomize=True, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(batch=st.lists(cases(), min_size=BATCH, max_size=BATCH))
def test_bad_input_ends_in_a_result_or_one_line_never_a_crash_a_hang_or_half_written_files(batch, tmp_path_factory):
    directories = [tmp_path_factory.mktemp("case") for _ in batch]
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes: list[Outcome] = list(pool.map(run, batch, directories))
    for outcome in outcomes:
        ended = "hang" if outcome.code is None else f"exit {outcome.code}"
        tally[(outcome.case.source.split()[0], ended)] += 1
    wrong = [(verdict(o), o) for o in outcomes if verdict(o)]
    assert not wrong, "\n\n".join(f"{problem}: {o.case}\nstderr: {o.stderr[-1500:]}" for problem, o in wrong)


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    if not tally:
        return
    cache = getattr(request.config, "cache", None)
    if cache is not None:
        cache.set("palm_search/fuzz", {f"{source} {ended}": n for (source, ended), n in sorted(tally.items())})
    print(f"\nfuzz: {sum(tally.values())} cases as processes")
    for (source, ended), n in sorted(tally.items()):
        print(f"  {source:<8} {ended:<8} {n:>5}")


def test_the_unmutated_inputs_run_so_the_fuzzer_mutates_something_that_works(tmp_path_factory):
    for case in (simulate_case({}, "base"), optimize_case(to_toml(BASES["study"]).encode(), "base")):
        outcome = run(case, tmp_path_factory.mktemp("base"))
        assert outcome.code == 0 and verdict(outcome) is None, (str(case), outcome.stderr[-2000:])
