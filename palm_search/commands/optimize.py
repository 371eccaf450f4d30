"""``palm-search optimize`` and ``palm-search dashboard``: the search from the command line."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from palm_search.search.run_control import INTERRUPTED_EXIT_CODE, Executor, check_executor, stop_on_sigint
from palm_search.search.study import StudySpec, load_study
from simulator import NETWORKS

if TYPE_CHECKING:  # rich is imported when a bar is drawn: the command line starts without it
    from rich.progress import TaskID

Opt = typer.Option


def resolve_spec(study_file: Path | None, model: str | None, hw: str | None, **overrides) -> StudySpec:
    """The study file's spec (or the embedded defaults) with the flags the user gave.

    Raises:
        InputError: missing model/hardware, bad values.
    """
    from simulator import InputError

    if study_file is not None:
        spec = load_study(study_file).replace(model=model, hardware=hw)
    elif model and hw:
        spec = StudySpec(model=model, hardware=hw)
    else:
        raise InputError("optimize: give --model and --hw, or --study FILE")
    return spec.replace(**overrides)


def optimize_command(
    model: Annotated[str | None, Opt("--model", help="Model preset, TOML file or Hugging Face config.json.")] = None,
    hw: Annotated[str | None, Opt("--hw", help="Hardware preset or TOML file.")] = None,
    study_file: Annotated[Path | None, Opt("--study", help="Study TOML (flags override it).")] = None,
    trials: Annotated[int | None, Opt(help="Finished trials the study should hold: simulations, each of a"
                                          " mapping that fits memory (plans over it are screened out first);"
                                          " default 300, or 50 after a screen.")] = None,
    sampler: Annotated[str | None, Opt(help="auto, tpe, random, exhaustive or nsga2.")] = None,
    seed: Annotated[int | None, Opt(help="Sampler seed.")] = None,
    objective: Annotated[list[str] | None, Opt(help="throughput, memory or tokens_per_s_per_user (repeat).")] = None,
    network: Annotated[str | None, Opt(help=f"{', '.join(NETWORKS)} (simulate --help).")] = None,
    fidelity: Annotated[str | None, Opt(help=(
        "screen: estimate every point of the space in closed form (ms each), simulate the best --trials;"
        " full: the sampler proposes every simulated point; auto (default): screen when the sampler is auto"
        " and the space exceeds the budget (up to 2,000,000 points and 40,000 plans)."))] = None,
    top: Annotated[int | None, Opt(help="Mappings shown at the end.")] = None,
    artifacts_top: Annotated[int | None, Opt(help="Top trials given a trace and pictures (0: none).")] = None,
    eval_timeout: Annotated[float | None, Opt(help=(
        "Wall-clock budget of one simulation (s, default 60): over it, its trial fails with the reason"
        " and the search goes on."))] = None,
    jobs: Annotated[int, Opt(help="Simulator worker processes (default: all cores).")] = 0,
    deterministic: Annotated[bool, Opt("--deterministic/--asynchronous", help=(
        "Synchronous batches (default): the same command and seed give the same trials for any --jobs."
        " --asynchronous keeps every worker busy and tells results as they come; not reproducible."))] = True,
    storage: Annotated[str | None, Opt(help="RDB URL instead of the run directory's journal.")] = None,
    run_dir: Annotated[Path | None, Opt(help="Run directory (default runs/<study name>).")] = None,
    json_output: Annotated[bool, Opt("--json", help="Print one JSON document on stdout.")] = False,
    executor: Annotated[str, Opt(help="Where simulations run: loky (local processes) or dask.")] = "loky",
    scheduler: Annotated[str | None, Opt(help="Dask scheduler tcp://HOST:PORT (default: a local cluster).")] = None,
    mode: Annotated[str | None, Opt(help=(
        "training (default) or inference: search for serving, each trial the batch's prefill and one decode"
        " step of its users; throughput is then system tokens/s."))] = None,
    prompt_length: Annotated[int | None, Opt(help="Inference: tokens of each user's prompt.")] = None,
    decode_context_length: Annotated[int | None, Opt(help=(
        "Inference: KV-cache tokens of the decode step (default prompt length + 1)."))] = None,
    users: Annotated[list[int] | None, Opt(help=(
        "Inference: concurrent users searched (repeat; default 1-128)."))] = None,
    min_tokens_per_s_per_user: Annotated[float | None, Opt(help=(
        "Inference: floor on each user's decode tokens/s; mappings below it complete as infeasible."))] = None,
    max_ttft_s: Annotated[float | None, Opt(help=(
        "Inference: ceiling on the time to first token (s, the batch's prefill)."))] = None,
    precision: Annotated[str | None, Opt(help=(
        "Number format of every mapping (a fixed Strategy field, e.g. bf16, bfloat8_b; simulate --help)."))] = None,
    stack: Annotated[str | None, Opt(help=(
        "Software stack preset or TOML file every trial runs under (default megatron-core; simulate --help)."))] = None,
) -> None:
    """Search the fastest mapping of MODEL on HW; re-running the same command resumes."""
    spec = resolve_spec(study_file, model, hw, trials=trials, sampler=sampler, seed=seed,
                        objectives=tuple(objective) if objective else None, network=network, top=top,
                        artifacts_top=artifacts_top, fidelity=fidelity, eval_timeout_s=eval_timeout, mode=mode,
                        prompt_length=prompt_length, decode_context_length=decode_context_length,
                        users=tuple(users) if users else None, min_tokens_per_s_per_user=min_tokens_per_s_per_user,
                        max_ttft_s=max_ttft_s, stack=stack)
    if precision is not None:
        from simulator import Strategy

        fixed = {**spec.fixed, "precision": precision}
        Strategy.from_dict({k: v for k, v in fixed.items() if k not in ("stage_devices", "stage_layers")})
        spec = spec.replace(fixed=fixed)
    _check_jobs(jobs)
    check_executor(executor, scheduler)
    directory = run_dir or Path("runs") / spec.name
    cluster = Executor(executor, scheduler, jobs or os.cpu_count() or 1)  # before the run directory exists
    try:
        cluster.warm_up(jobs or os.cpu_count() or 1)  # the workers start while the search modules import
        from palm_search.search.baseline import choose_baseline  # optuna and pandas: only for the search
        from palm_search.search.driver import open_search, optimize, run_baseline
        from palm_search.views.outputs import dashboard_command, strict_json, write_outputs
        from palm_search.views.render import print_search_summary

        with opening_notice(spec, jobs or os.cpu_count() or 1):
            search = open_search(spec, run_dir=directory, storage=storage, jobs=jobs or os.cpu_count() or 1,
                                 deterministic=deterministic)
        search.backend = cluster.backend
        finished_before = _finished_trials(search.study)
        baseline, note = choose_baseline(spec, search.model, search.hardware)
        search.study.set_user_attr("baseline_note", note)
        with progress_bar(search.spec.trials) as (progress, task), stop_on_sigint(search):
            if search.screened:
                progress.update(task, description=f"baseline, then screening {search.screened.points:,} points")
                search.screened.on_progress = lambda done, points: progress.update(
                    task, description=f"screen: {done:,} of {points:,} points estimated")
            run_baseline(search, baseline)
            unit = "tokens/s" if search.spec.serving else "samples/s"
            optimize(search, lambda p: progress.update(task, completed=p.done, description=describe_progress(p, unit)))
    finally:
        cluster.close()
    summary = write_outputs(search, directory)
    if search.interrupted:
        typer.echo(f"interrupted: {summary['trials']} of {search.spec.trials} trials finished, outputs written to "
                   f"{directory}; run the same command to resume", err=True)
        raise typer.Exit(code=INTERRUPTED_EXIT_CODE)
    summary["illustrated_trials"] = _attach(search, directory)
    summary["baseline_note"] = note
    summary["new_trials"] = _finished_trials(search.study) - finished_before
    summary["devices"] = devices_used(spec, search.hardware)
    _note_study(search, summary)
    summary["dashboard"] = dashboard_command(directory, storage)
    if json_output:
        typer.echo(strict_json(summary))
    else:
        print_search_summary(summary)


def _finished_trials(study) -> int:
    """Trials the study holds COMPLETE or FAIL."""
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)))


def devices_used(spec: StudySpec, hardware) -> str:
    """How many devices the mappings use and where that number comes from (``1,024 GPUs: the
    h100-cluster preset's size``)."""
    from simulator import hardware_presets

    noun = hardware.network.device_noun
    if spec.device_counts:
        counts = ", ".join(f"{n:,}" for n in spec.device_counts)
        return f"{counts} of the machine's {hardware.num_devices:,} {noun}: the study's [search] devices"
    source = (f"the {spec.hardware} preset's size" if spec.hardware in hardware_presets()
              else f"the size of the machine in {spec.hardware}")
    return f"{hardware.num_devices:,} {noun}: {source} (a study file's [search] devices = [...] allows fewer)"


def _note_study(search, summary: dict) -> None:
    """The study's note in optuna-dashboard: the explanation and what the parameters encode."""
    from optuna_dashboard import save_note

    from palm_search.views.explain import study_note

    save_note(search.study, study_note(summary))


def _check_jobs(jobs: int) -> None:
    """Raises: InputError: a negative ``--jobs``."""
    from simulator import InputError

    if jobs < 0:
        raise InputError(f"--jobs must be >= 0 (0: all cores), got {jobs}")


def _attach(search, directory: Path) -> list[int]:
    """Trace and pictures of the top trials and the baseline, as Optuna artifacts."""
    from palm_search.views.artifacts import attach_artifacts

    if not search.spec.artifacts_top:
        return []
    with progress_bar(search.spec.artifacts_top + 1, "pictures") as (progress, task):
        return attach_artifacts(search.study, search.storage, search.model, search.hardware, search.spec.network,
                                directory, search.spec.artifacts_top,
                                lambda done, total: progress.update(task, completed=done, total=total),
                                jobs=search.jobs, stack=search.stack)


def describe_progress(p, unit: str = "samples/s") -> str:
    """A search's progress ``p`` (:class:`palm_search.search.driver.Progress`) in a few words."""
    return f"feasible {p.feasible} cached {p.cached} failed {p.failed} best {p.best:.4g} {unit}"


class progress_bar:
    """A rich progress bar with its ETA on stderr; when stderr is not a terminal (a log file, CI),
    a plain line at every tenth of the work instead (:class:`_ProgressLines`)."""

    def __init__(self, total: int, label: str = "trials") -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        console = Console(stderr=True)
        self.progress = Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.description}"), TimeElapsedColumn(), TextColumn("eta"),
                                 TimeRemainingColumn(), console=console, disable=not console.is_terminal)
        self.lines = None if console.is_terminal else _ProgressLines(label, total)
        self.total = total

    def __enter__(self):
        self.progress.start()
        return self.lines or self.progress, self.progress.add_task("", total=self.total)

    def __exit__(self, *exc) -> None:
        self.progress.stop()


class opening_notice:
    """One line on stderr when opening the study (loading the model and machine, pre-screening
    the space's plans for memory on ``jobs`` workers, walking it) takes over :data:`AFTER_S`
    seconds, as it does on large spaces (about 15 s for Qwen3-30B-A3B on ``wafer-4``) before the
    first progress line; nothing on small ones, whose errors stay one line."""

    AFTER_S = 5.0

    def __init__(self, spec: StudySpec, jobs: int) -> None:
        import threading

        message = (f"opening study {spec.name}: pre-screening the space's plans for memory on {jobs} workers and"
                   " walking it")
        self.timer = threading.Timer(self.AFTER_S, lambda: typer.echo(message, err=True))
        self.timer.daemon = True

    def __enter__(self) -> opening_notice:
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()


class _ProgressLines:
    """Progress as plain lines on stderr, one per tenth of ``total`` (the ``update`` of rich's
    ``Progress`` that the search calls); between them, a changed description (the screen's
    progress before the first trial) at most every :data:`QUIET_S` seconds."""

    QUIET_S = 10.0

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.shown = label, total, 0
        self.started = self.said_at = time.monotonic()
        self.said = ""

    def update(self, task: TaskID, completed: int = 0, total: int | None = None, description: str = "") -> None:
        self.total = total or self.total
        step, now = max(self.total // 10, 1), time.monotonic()
        if completed >= self.shown + step or (completed == self.total and completed > self.shown):
            self.shown = completed
        elif not description or description == self.said or (self.said and now - self.said_at < self.QUIET_S):
            return
        self.said, self.said_at = description, now
        typer.echo(f"{self.label} {max(completed, self.shown)}/{self.total} after {now - self.started:.0f} s"
                   f" {description}".rstrip(), err=True)


def dashboard_cmd(
    run_dir: Annotated[Path, typer.Argument(help="A run directory of palm-search optimize.")],
    host: Annotated[str, Opt(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, Opt(help="Port.")] = 8080,
) -> None:
    """Serve the run's study in optuna-dashboard."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from optuna_dashboard import run_server

    from palm_search.search.storage import JOURNAL
    from simulator import InputError

    journal = run_dir / JOURNAL
    if not journal.is_file():
        raise InputError(f"dashboard: {journal} does not exist (run palm-search optimize first)")
    from palm_search.views.artifacts import artifact_store

    with socket.socket() as probe:  # optuna-dashboard reports a busy port as a traceback
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise InputError(f"dashboard: cannot listen on {host}:{port} ({error.strerror}); choose --port") from None
    typer.echo(f"optuna-dashboard on http://{host}:{port}/ (Ctrl-C stops)", err=True)
    run_server(JournalStorage(JournalFileBackend(str(journal))), host=host, port=port,
               artifact_store=artifact_store(run_dir))
