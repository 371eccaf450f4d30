"""The search summary fits an 80-column terminal: one line per mapping, nothing folded or cut."""

from __future__ import annotations

import pytest
from rich.console import Console

from palm_search.views.render import print_search_summary


def _row(number: int, **fields) -> dict:
    row = {"trial": number, "tp": 32, "pp": 80, "dp": 16, "microbatch_size": 16, "schedule": "interleaved-1f1b",
           "recompute": "selective", "zero_stage": 3, "shard_group_size": 8, "placement": "s-shape-transposed",
           "group_layout": "strided",
           "samples_per_s": 1234.5678, "model_flops_utilisation": 0.4567, "peak_memory_GiB": 71.25,
           "bubble_fraction": 0.0123,
           "speedup": 12.345}
    return {**row, **fields}


def _summary(top: list[dict]) -> dict:
    return {"study": "s", "trials": 50, "feasible": 50, "failed": 0, "sampler": "screen (sharing)", "top": top,
            "baseline": {}, "run_dir": "runs/s", "dashboard": "palm-search dashboard runs/s"}


def _printed(width: int, top: list[dict]) -> list[str]:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115 - closed with the console
    print_search_summary(_summary(top), console)
    return console.export_text().splitlines()


def test_the_top_mappings_fit_80_columns_one_line_each_with_a_legend():
    top = [_row(n) for n in range(100, 110)]
    lines = _printed(80, top)
    assert max(len(line) for line in lines) <= 80
    rows = [line for line in lines if line.split() and line.split()[0] in {str(n) for n in range(100, 110)}]
    assert len(rows) == 10  # no row folded onto a second line
    assert all("s-shape-transposed" in r and "32.80.16" in r and "i1f1b" in r and "45.7%" in r for r in rows)
    assert all(" 3/8 " in r for r in rows)  # ZeRO-3 sharded over groups of 8 (hybrid)
    assert any("tp.pp.dp: parallel degrees" in line for line in lines)


def test_a_wide_terminal_shows_every_column():
    lines = _printed(160, [_row(1)])
    header = next(line for line in lines if "samples/s" in line)
    for column in ("groups", "GiB/dev", "bubble", "speedup"):
        assert column in header


def test_a_150_column_pipe_holds_each_mapping_on_one_line_context_parallelism_and_group_order_included():
    top = [_row(n, dp=16, cp=8, group_order="tp-major") for n in range(100, 110)]
    numbers = {str(n) for n in range(100, 110)}
    rows = [line for line in _printed(150, top) if line.split() and line.split()[0] in numbers]
    assert len(rows) == 10 and all("DP 16 x CP 8" in r and "strided/tp" in r and "interleaved-1f1b" in r for r in rows)


def test_the_summary_says_whether_data_parallelism_or_3d_parallelism_is_faster():
    import pandas as pd

    from palm_search.views.outputs import family_bests

    frame = pd.DataFrame([
        {"trial": 0, "state": "COMPLETE", "feasible": True, "tp": 8, "pp": 1, "zero_stage": 1, "samples_per_s": 100.0},
        {"trial": 1, "state": "COMPLETE", "feasible": True, "tp": 1, "pp": 1, "zero_stage": 3, "samples_per_s": 250.0},
        {"trial": 2, "state": "COMPLETE", "feasible": True, "tp": 1, "pp": 4, "zero_stage": 0, "samples_per_s": 125.0},
        {"trial": 3, "state": "COMPLETE", "feasible": False, "tp": 1, "pp": 1, "zero_stage": 3, "samples_per_s": 0.0},
        {"trial": 4, "state": "COMPLETE", "feasible": True, "tp": 1, "pp": 1, "zero_stage": 2, "samples_per_s": 300.0},
    ])
    families = family_bests(frame)
    assert families == {"data parallel": {"trial": 4, "samples_per_s": 300.0},
                        "3D parallel": {"trial": 2, "samples_per_s": 125.0}}
    summary = {**_summary([_row(1)]), "families": families}
    console = Console(width=160, record=True, file=open("/dev/null", "w"))  # noqa: SIM115 - closed with the console
    print_search_summary(summary, console)
    assert "data parallel 2.4x faster" in console.export_text()


def _screened_trial(estimate: float, simulated: float, feasible: bool = True):
    import optuna

    from palm_search.search.screen import ESTIMATE_KEY

    return optuna.trial.create_trial(value=simulated, user_attrs={ESTIMATE_KEY: estimate, "samples_per_s": simulated,
                                                                  "feasible": feasible})


def test_the_screen_agreement_gives_how_far_apart_the_simulations_are_and_the_largest_estimate_gap():
    from palm_search.search.screen import rank_agreement

    trials = [_screened_trial(1.01, 1.0), _screened_trial(0.99, 0.995), _screened_trial(0.9, 0.8),
              _screened_trial(5.0, 0.0, feasible=False)]
    agreement = rank_agreement(trials)
    assert agreement is not None
    # ranks (3, 2, 1) against (3, 2, 1); the infeasible trial is left out
    assert agreement.spearman == 1.0 and agreement.compared == 3
    assert abs(agreement.simulated_span - 0.2) < 1e-12  # 1 - 0.8 / 1.0
    assert abs(agreement.largest_gap - 0.125) < 1e-12  # 0.9 / 0.8 - 1
    assert rank_agreement(trials[:2]) is None  # fewer than 3 compared


def test_the_summary_says_how_close_the_simulations_a_low_rank_agreement_ranks_are():
    summary = {**_summary([_row(1)]), "screen": {"points": 6732, "seconds": 6.5, "queued": 49, "spearman": 0.37,
                                                 "compared": 49, "simulated_span": 0.0006, "largest_gap": 0.0021}}
    console = Console(width=400, record=True, file=open("/dev/null", "w"))  # noqa: SIM115 - closed with the console
    print_search_summary(summary, console)
    line = next(line for line in console.export_text().splitlines() if line.startswith("screen:"))
    assert "Spearman 0.37 over 49 simulated (their samples/s within 0.1% of each other" in line
    assert "every estimate within 0.2% of its simulation)" in line


def test_a_serving_summary_says_how_close_the_simulations_tokens_per_s_are():
    summary = {**_summary([_row(1, users=64)]), "mode": "inference",
               "screen": {"points": 9828, "seconds": 2.0, "queued": 49, "spearman": 0.97, "compared": 49,
                          "simulated_span": 0.981, "largest_gap": 0.05}}
    console = Console(width=400, record=True, file=open("/dev/null", "w"))  # noqa: SIM115 - closed with the console
    print_search_summary(summary, console)
    line = next(line for line in console.export_text().splitlines() if line.startswith("screen:"))
    assert "(their tokens/s within 98.1% of each other" in line


def test_the_screen_certifies_the_margin_below_the_best_estimate_that_was_all_queued():
    from palm_search.search.screen import certified_margin

    assert certified_margin([1.0, 0.98], [0.95, 0.9]) == pytest.approx(0.05, rel=1e-12)  # 1 - 0.95 / 1.0
    assert certified_margin([1.0], []) == 1.0  # every positive point queued
    assert certified_margin([], [0.5]) == 0.0
    assert certified_margin([0.9, 1.0], [0.95]) == pytest.approx(0.05, rel=1e-12)  # a front-first order


@pytest.mark.parametrize(("simulated", "margin", "expected"), [
    (49, 0.0123, "certified: every point whose estimate is within 1.23% of the best estimate was simulated"),
    (49, 1.0, "certified: every point with a positive estimate was simulated"),
    (48, 0.0123, None),
    (49, 0.0, None)])  # a point left out estimates as well as the best queued: nothing certified
def test_the_summary_prints_the_certificate_only_once_every_queued_point_is_simulated(simulated, margin, expected):
    summary = {**_summary([_row(1)]), "screen": {"points": 6732, "seconds": 6.5, "queued": 49, "spearman": None,
                                                 "compared": 0, "margin": margin, "queued_simulated": simulated}}
    console = Console(width=400, record=True, file=open("/dev/null", "w"))  # noqa: SIM115 - closed with the console
    print_search_summary(summary, console)
    lines = [line for line in console.export_text().splitlines() if line.startswith("certified:")]
    assert lines == ([expected] if expected else [])
