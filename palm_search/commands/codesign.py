"""``palm-search codesign``: search the chip together with its mappings (PHAZE-style co-design)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from palm_search.commands.optimize import _check_jobs, progress_bar

Opt = typer.Option


def codesign_command(
    study_file: Annotated[Path, Opt("--study", help="Co-design study TOML ([codesign], [hardware_space]...).")],
    model: Annotated[list[str] | None, Opt("--model", help=(
        "Model preset or file (repeat; replaces the study's)."))] = None,
    objective: Annotated[str | None, Opt(help=(
        "throughput, throughput_per_area, throughput_per_power, pareto_area or pareto_power."))] = None,
    trials: Annotated[int | None, Opt(help=(
        "Chips refined with event-driven simulations after every chip is screened in closed form"
        " (each: --refine mappings per model); default 12."))] = None,
    refine: Annotated[int | None, Opt(help="Best-estimated mappings simulated per model on each refined chip.")] = None,
    screen_chips: Annotated[int | None, Opt(help=(
        "Chips to screen: 0 (default) screens every chip of the space; N has a sampler (TPE, or NSGA-II for"
        " a front) propose N, as a space of more than 2,000 chips needs."))] = None,
    seed: Annotated[int | None, Opt(help="Seed of the sampler of --screen-chips.")] = None,
    jobs: Annotated[int, Opt(help="Worker processes (default: all cores).")] = 0,
    run_dir: Annotated[Path | None, Opt(help="Run directory (default runs/<study name>).")] = None,
    json_output: Annotated[bool, Opt("--json", help="Print one JSON document on stdout.")] = False,
) -> None:
    """Search chips around the study's base hardware together with each model's mapping: every chip
    is costed (area, power) and screened, the best are simulated. Writes best-hardware.toml (replay:
    palm-search simulate --hw), best.json, trials.csv, report.html and the dashboard's study."""
    from palm_search.codesign.outputs import write_codesign
    from palm_search.codesign.search import run_codesign
    from palm_search.codesign.spec import check_references, load_codesign
    from palm_search.views.outputs import strict_json

    _check_jobs(jobs)
    spec = load_codesign(study_file).replace(models=tuple(model) if model else None, objective=objective,
                                             trials=trials, refine=refine, screen_chips=screen_chips, seed=seed)
    check_references(spec)
    directory = run_dir or Path("runs") / spec.name
    with progress_bar(1, "co-design") as (progress, task):
        def report(phase: str, done: int, total: int) -> None:
            label = "chips screened" if phase == "screen" else "mappings simulated"
            progress.update(task, completed=done, total=total, description=label)
        run = run_codesign(spec, jobs or os.cpu_count() or 1, report)
    summary = write_codesign(run, directory)
    summary["run_dir"] = str(directory)
    if json_output:
        typer.echo(strict_json(summary))
    else:
        _print_summary(summary)


def _print_summary(summary: dict) -> None:
    """The answer in a few lines."""
    echo = typer.echo
    echo(f"{summary['chips']} chips screened, {summary['feasible_chips']} within the budgets "
         f"({summary['area_budget_m2'] * 1e6:,.0f} mm^2, {summary['power_budget_W']:,.0f} W); "
         f"{summary['estimated_mappings']:,} mappings estimated, {summary['simulations']} simulated "
         f"in {summary['screen_s'] + summary['refine_s']:.1f} s")
    if summary["rank_agreement"] is not None:
        echo(f"estimate vs simulation over the refined chips: Spearman {summary['rank_agreement']:.2f}")
    for title, chip in (("base", summary["base"]), ("best", summary["best"])):
        if chip is None:
            echo("best: no chip fits every model within the budgets")
            continue
        named = "" if chip["label"] == title else f" {chip['label']}:"  # the base chip's label is "base"
        echo(f"{title}:{named} {chip['samples_per_s']:.4g} samples/s (mean), "
             f"{chip['area_m2'] * 1e6:,.0f} mm^2, {chip['power_W']:,.0f} W")
        for name, result in chip["per_model"].items():
            echo(f"  {name}: {result['samples_per_s']:.4g} samples/s, {result['mapping']}")
    best = summary["best"]
    if best and best.get("speedup_over_base"):
        echo(f"the best chip trains {best['speedup_over_base']:.3f}x as fast as the base chip")
    echo(f"outputs: {summary['run_dir']}/ (best-hardware.toml, best.json, trials.csv, report.html); "
         f"dashboard: palm-search dashboard {summary['run_dir']}")
