"""The search driver: one process owns the Optuna study (ask/tell); joblib workers simulate.

* Storage: a journal file ``RUN_DIR/study.journal`` by default, or an RDB URL. Re-running the
  same command loads the study and goes on until it has ``trials`` finished trials; trials an
  interrupted run left RUNNING are evaluated again and told, so none is lost.
* Trials: a strategy over memory COMPLETEs with its value and a violated constraint
  (``trial.set_constraint``, value > 0 is infeasible; Optuna 5) plus its reason in the user
  attributes; an exception in a worker FAILs that trial with its message. Identical strategies
  are simulated once (:func:`palm_search.evaluate.cache_key`).
* Order: the baseline is trial 0. With ``deterministic`` the driver asks a fixed-size batch,
  evaluates it, and tells it in order, so results do not depend on the number of workers;
  otherwise it keeps every worker busy and tells results as they come.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from joblib import Parallel, delayed
from joblib.externals.loky.process_executor import TerminatedWorkerError
from optuna.trial import TrialState

from palm_search.evaluate import RECORD_KEYS, cache_key, evaluate
from palm_search.space import Builder, enumerate_points, strategy_builder
from palm_search.storage import (
    Heartbeat,
    beat_now,
    fail_stale,
    heartbeat_enabled,
    journal_storage,
    rdb_storage,
)
from palm_search.study import StudySpec, spec_to_attrs
from simulator import Hardware, InputError, ModelSpec, Strategy, load_hardware, load_model

logger = logging.getLogger(__name__)
UNFINISHED = (TrialState.RUNNING, TrialState.WAITING)


@dataclass
class Progress:
    """Counters a progress display shows (updated after every told trial)."""

    done: int = 0
    feasible: int = 0
    cached: int = 0
    failed: int = 0
    best: float = 0.0
    total: int = 0


@dataclass
class Search:
    """One study being optimised."""

    spec: StudySpec
    model: ModelSpec
    hardware: Hardware
    study: optuna.Study
    build: Builder
    jobs: int = 1
    deterministic: bool = False
    cache: dict[str, dict] = field(default_factory=dict)
    progress: Progress = field(default_factory=Progress)
    backend: str = "loky"
    """joblib backend the simulations run on: ``loky`` (local processes) or ``dask`` (a cluster)."""
    evaluator: Callable[..., dict] = evaluate
    """``(model, hardware, strategy, network) -> record``; a module-level function (it is pickled)."""
    interrupted: bool = False
    """Set (e.g. by SIGINT) to stop asking: in-flight trials are told, then the run ends."""
    running: set[int] = field(default_factory=set)
    """Ids of the trials this process holds RUNNING (a :class:`Heartbeat` beats them)."""


def storage_for(run_dir: Path, url: str | None):
    """The study storage: ``url`` (an RDB URL, with heartbeats) or the run directory's journal file.

    Raises:
        InputError: bad URL, unreachable server, corrupt journal.
    """
    return rdb_storage(url) if url else journal_storage(run_dir)


def make_sampler(spec: StudySpec, exhaustive: bool) -> optuna.samplers.BaseSampler:
    """TPE (multivariate, grouped for conditional spaces), NSGA-II, or random; random also
    serves the exhaustive walk, whose points are all enqueued."""
    if exhaustive or spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=spec.seed)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if spec.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=spec.seed)
    return optuna.samplers.TPESampler(seed=spec.seed, multivariate=True, group=True,
                                      constant_liar=True, n_startup_trials=min(20, spec.trials // 4 + 1))


def open_search(spec: StudySpec, *, run_dir: Path, storage: str | None = None, jobs: int = 1,
                deterministic: bool = False) -> Search:
    """Load the model and machine, open (or resume) the study, enqueue the exhaustive walk.

    With sampler ``exhaustive`` (or ``auto`` when the space has at most ``trials`` points) every
    point of the space is enqueued and the budget shrinks to the points plus the baseline.

    Raises:
        InputError: bad model, hardware or study values.
    """
    model, hardware = load_model(spec.model), load_hardware(spec.hardware)
    build = strategy_builder(spec, model, hardware)
    points = None
    if spec.sampler in ("auto", "exhaustive"):
        points = enumerate_points(build, spec.trials if spec.sampler == "auto" else 10**6)
    if points is not None:
        spec = spec.replace(trials=min(spec.trials, len(points) + 1))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=spec.name, storage=storage_for(run_dir, storage),
                                sampler=make_sampler(spec, points is not None),
                                directions=spec.directions, load_if_exists=True)
    search = Search(spec=spec, model=model, hardware=hardware, study=study, build=build, jobs=jobs,
                    deterministic=deterministic)
    if not study.trials:
        study.set_user_attr("spec", spec_to_attrs(spec))
        study.set_user_attr("sampler", "exhaustive" if points is not None else spec.sampler)
        for params in points or []:
            study.enqueue_trial(params)
    _load_cache(search)
    return search


def _load_cache(search: Search) -> None:
    """Fill the cache from the study's completed trials (a resumed study simulates nothing twice)."""
    for trial in search.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if "strategy" in trial.user_attrs:
            strategy = Strategy.from_dict(trial.user_attrs["strategy"])
            key = cache_key(search.model, search.hardware, strategy, search.spec.network)
            search.cache[key] = {k: trial.user_attrs.get(k) for k in RECORD_KEYS}


def objective_values(spec: StudySpec, record: dict) -> list[float]:
    """Objective values of a record: samples/s (0 when infeasible) and peak memory (GiB)."""
    values = {"throughput": record["samples_per_s"] if record["feasible"] else 0.0,
              "memory": record["peak_memory_bytes"] / 2**30}
    return [values[o] for o in spec.objectives]


def tell(search: Search, trial: optuna.Trial, strategy: Strategy | None, record: dict, cached: bool,
         baseline: bool = False) -> None:
    """Record ``record`` on ``trial`` and finish it (COMPLETE, or FAIL on error)."""
    study, progress = search.study, search.progress
    if strategy is not None:
        trial.set_user_attr("strategy", strategy.to_dict())
    for key in RECORD_KEYS:
        if key in record:
            trial.set_user_attr(key, record[key])
    trial.set_user_attr("cached", cached)
    named = [v for k, v in trial.params.items() if k.split("|")[0] == "placement"]
    if named:
        trial.set_user_attr("placement_name", named[0])
    trial.set_user_attr("baseline", baseline)
    search.running.discard(trial._trial_id)
    progress.done += 1
    if record.get("error"):
        progress.failed += 1
        study.tell(trial, state=TrialState.FAIL)
        return
    trial.set_constraint("memory_over_capacity_bytes", record["memory_over_capacity_bytes"])
    progress.feasible += bool(record["feasible"])
    progress.cached += cached
    progress.best = max(progress.best, record["samples_per_s"] if record["feasible"] else 0.0)
    study.tell(trial, objective_values(search.spec, record))


def counted(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a trial counts toward the budget: COMPLETE, or FAIL with an evaluation error. A trial
    failed because its process vanished (no ``error``; retried as a new trial) or pruned because
    another worker reached the budget first does not count."""
    failed = trial.state == TrialState.FAIL and bool(trial.user_attrs.get("error"))
    return trial.state == TrialState.COMPLETE or failed


def _finished(study: optuna.Study) -> int:
    return sum(counted(t) for t in study.get_trials(deepcopy=False))


def run_baseline(search: Search, baseline: Strategy) -> None:
    """Evaluate the baseline as the study's first trial (once per study)."""
    if any(t.user_attrs.get("baseline") for t in search.study.get_trials(deepcopy=False)):
        return
    record = evaluate(search.model, search.hardware, baseline, search.spec.network)
    trial = search.study.ask(fixed_distributions={})
    search.cache[cache_key(search.model, search.hardware, baseline, search.spec.network)] = record
    tell(search, trial, baseline, record, cached=False, baseline=True)


def _decode(search: Search, trial: optuna.Trial) -> tuple[Strategy | None, dict | None]:
    """The trial's strategy, or an error record when the space cannot build one."""
    try:
        return search.build(trial), None
    except InputError as error:
        return None, {"error": f"InputError: {error}"}


def _stale(search: Search) -> list[optuna.Trial]:
    """Trials an interrupted driver left RUNNING, reopened to be evaluated again (journal storage).
    With heartbeats (RDB) RUNNING trials may belong to live workers: only the stale ones are failed
    and queued again as WAITING copies, which ``study.ask()`` returns first."""
    study = search.study
    if heartbeat_enabled(study._storage):
        fail_stale(study)
        return []
    numbers = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    return [optuna.Trial(study, study._storage.get_trial_id_from_study_id_trial_number(study._study_id, n))
            for n in numbers]


def optimize(search: Search, on_progress: Callable[[Progress], None] = lambda p: None) -> None:
    """Ask, evaluate and tell until the study holds ``spec.trials`` finished trials."""
    search.progress.total = search.spec.trials
    search.progress.done = _finished(search.study)
    pending = _stale(search)
    runner = _run_batches if search.deterministic else _run_streaming
    if not heartbeat_enabled(search.study._storage):
        runner(search, pending, on_progress)
        return
    with Heartbeat(search.study._storage, search.running):
        runner(search, pending, on_progress)


def _asked(search: Search, pending: list[optuna.Trial], budget: int) -> Iterator[optuna.Trial]:
    """Reopened stale trials first, then fresh ones, ``budget`` in all."""
    for _ in range(budget):
        if search.interrupted:
            return
        trial = pending.pop(0) if pending else search.study.ask()
        search.running.add(trial._trial_id)
        beat_now(search.study, trial._trial_id)
        yield trial


def _budget(search: Search, pending: list[optuna.Trial]) -> int:
    """Trials still to ask: what the study lacks (stale ones included), at least the stale ones."""
    return max(search.spec.trials - _finished(search.study), len(pending))


def _prepare(search: Search, trial: optuna.Trial):
    """(trial, strategy, key, record-or-None): a record when no simulation is needed."""
    strategy, failure = _decode(search, trial)
    if failure:
        return trial, None, None, failure
    key = cache_key(search.model, search.hardware, strategy, search.spec.network)
    return trial, strategy, key, search.cache.get(key)


def _finish(search: Search, prepared, record: dict, on_progress) -> None:
    trial, strategy, key, known = prepared
    cached = known is not None and key is not None
    if key is not None and not record.get("error"):
        search.cache.setdefault(key, record)
    tell(search, trial, strategy, record, cached)
    on_progress(search.progress)


def _run_batches(search: Search, pending: list[optuna.Trial], on_progress) -> None:
    while not search.interrupted and (budget := _budget(search, pending)) > 0:
        batch = [_prepare(search, t) for t in _asked(search, pending, min(search.spec.batch_size, budget))]
        todo = {p[2]: p[1] for p in batch if p[3] is None}
        records = dict(zip(todo, _parallel(search, list(todo.values())), strict=True))
        for prepared in batch:
            _finish(search, prepared, prepared[3] or records[prepared[2]], on_progress)


def _parallel(search: Search, strategies: list[Strategy]) -> list[dict]:
    """Records of ``strategies`` in order; if a worker process dies, each is retried alone."""
    if not strategies:
        return []
    try:
        return Parallel(n_jobs=search.jobs, backend=_backend(search))(
            delayed(search.evaluator)(search.model, search.hardware, s, search.spec.network) for s in strategies)
    except _worker_deaths(search) as error:
        logger.warning("a simulator worker process died (%s); retrying its batch one strategy at a time", error)
        return [_isolated(search, s) for s in strategies]


def _isolated(search: Search, strategy: Strategy) -> dict:
    """Evaluate ``strategy`` alone in a fresh worker process: if that process dies too, the death
    is the strategy's, and it becomes the record's error (its trial FAILs; the search goes on)."""
    try:
        [record] = Parallel(n_jobs=2, backend=_backend(search))(
            [delayed(search.evaluator)(search.model, search.hardware, strategy, search.spec.network)])
        return record
    except _worker_deaths(search) as error:
        return {"error": f"worker process died: {type(error).__name__}: {' '.join(str(error).split())[:300]}"}


def _backend(search: Search) -> str | None:
    """The ``Parallel`` backend argument: dask runs inside the ``parallel_config(backend="dask")``
    the executor entered (:class:`palm_search.run_control.Executor`), so it is left to that."""
    return None if search.backend == "dask" else search.backend


def _worker_deaths(search: Search) -> tuple[type[BaseException], ...]:
    """Exceptions by which a joblib backend reports a dead worker process."""
    if search.backend == "dask":
        from distributed import KilledWorker

        return TerminatedWorkerError, KilledWorker
    return (TerminatedWorkerError,)


def _run_streaming(search: Search, pending: list[optuna.Trial], on_progress) -> None:
    """Keep every worker busy: ask lazily as joblib pulls tasks, tell in completion order. If a
    worker process dies, the trials in flight are evaluated again one at a time and the stream
    goes on in a new pool."""
    waiting: dict[int, tuple] = {}
    while True:
        try:
            _stream(search, pending, waiting, on_progress)
            return
        except _worker_deaths(search) as error:
            logger.warning("a simulator worker process died (%s); retrying %d in-flight trials one at a time",
                           error, len(waiting))
            for number in list(waiting):
                prepared = waiting.pop(number)
                _finish(search, prepared, _isolated(search, prepared[1]), on_progress)


def _stream(search: Search, pending: list[optuna.Trial], waiting: dict[int, tuple], on_progress) -> None:
    known: list[tuple] = []

    def tasks():
        for trial in _asked(search, pending, _budget(search, pending)):
            prepared = _prepare(search, trial)
            if prepared[3] is not None:
                known.append(prepared)
                continue
            waiting[trial.number] = prepared
            yield delayed(_numbered)(search.evaluator, trial.number, search.model, search.hardware, prepared[1],
                                     search.spec.network)

    stream = Parallel(n_jobs=search.jobs, backend=_backend(search), return_as="generator_unordered",
                      pre_dispatch=str(2 * max(search.jobs, 1)))(tasks())
    for number, record in stream:
        while known:
            prepared = known.pop(0)
            _finish(search, prepared, prepared[3], on_progress)
        _finish(search, waiting.pop(number), record, on_progress)
    for prepared in known:
        _finish(search, prepared, prepared[3], on_progress)


def _numbered(evaluator: Callable[..., dict], number: int, model: ModelSpec, hardware: Hardware,
              strategy: Strategy, network: str):
    """Worker task: the trial number with its evaluation record."""
    return number, evaluator(model, hardware, strategy, network)
