"""``palm-search worker``: join a study kept in an RDB and evaluate its trials (see palm_search.search.worker)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from palm_search.commands.optimize import describe_progress, progress_bar
from palm_search.search.run_control import INTERRUPTED_EXIT_CODE, stop_on_sigint
from palm_search.search.storage import GRACE_PERIOD_S, HEARTBEAT_INTERVAL_S

Opt = typer.Option


def worker_cmd(
    storage: Annotated[str, Opt("--storage", help="RDB URL of the study, e.g. postgresql+psycopg2://u@host/db.")],
    study: Annotated[str, Opt("--study", help="Study name (as palm-search optimize created it).")],
    trials: Annotated[int | None, Opt(help="Counted trials the study should hold (default: its own budget).")] = None,
    heartbeat_interval: Annotated[int, Opt(help="Seconds between heartbeats of a trial.")] = HEARTBEAT_INTERVAL_S,
    grace_period: Annotated[int, Opt(help="Seconds without heartbeat before a retry.")] = GRACE_PERIOD_S,
    json_output: Annotated[bool, Opt("--json", help="Print one JSON document on stdout.")] = False,
) -> None:
    """Evaluate trials of STUDY in this process until the study holds its budget (several workers,
    on one host or many, share one study)."""
    from palm_search.search.worker import open_worker, run_worker
    from simulator import InputError

    if trials is not None and trials < 1:
        raise InputError(f"--trials must be >= 1, got {trials}")
    if heartbeat_interval < 1 or grace_period <= heartbeat_interval:
        raise InputError(f"need 1 <= --heartbeat-interval < --grace-period, got {heartbeat_interval}, {grace_period}")
    search = open_worker(storage, study, trials, heartbeat_interval, grace_period)
    unit = "tokens/s" if search.spec.serving else "samples/s"
    with progress_bar(search.spec.trials) as (progress, task), stop_on_sigint(search):
        told = run_worker(search, lambda p: progress.update(task, completed=p.done,
                                                            description=describe_progress(p, unit)))
    summary = {"study": study, "told": told, "counted": search.progress.done, "trials": search.spec.trials}
    if json_output:
        typer.echo(json.dumps(summary))
    else:
        typer.echo(f"worker: told {told} trials; the study holds {search.progress.done} of {search.spec.trials}")
    if search.interrupted:
        typer.echo("interrupted: the worker stopped after its current trial", err=True)
        raise typer.Exit(code=INTERRUPTED_EXIT_CODE)
