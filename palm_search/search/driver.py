"""The search driver: one process owns the Optuna study (ask/tell); joblib workers simulate.

* Storage: a journal file ``RUN_DIR/study.journal`` by default, or an RDB URL. Re-running the
  same command loads the study and goes on until it has ``trials`` finished trials; trials an
  interrupted run left RUNNING are evaluated again and told, so none is lost.
* Trials: a strategy over memory COMPLETEs with its value and a violated constraint
  (``trial.set_constraint``, value > 0 is infeasible; Optuna 5) plus its reason in the user
  attributes; an exception in a worker FAILs that trial with its message. Identical strategies
  are simulated once (:func:`palm_search.search.evaluate.cache_key`).
* Order: the baseline is trial 0. By default (``deterministic``) the driver asks fixed-size
  batches and tells each in order, so results do not depend on the number of workers and the
  sampler never sees more than one batch pending; two batches are in flight (three when the
  sampler does not learn from results), so the workers simulate the next while the driver tells
  one. Asynchronously it keeps every worker busy and tells results as they come.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import chain, islice
from pathlib import Path
from typing import Any

import optuna
from joblib import Parallel, delayed, parallel_config
from joblib.externals.loky.process_executor import TerminatedWorkerError
from optuna.trial import TrialState

from palm_search.search.evaluate import (
    RECORD_KEYS,
    SERVING_KEYS,
    ServingTarget,
    cache_key,
    evaluate,
    evaluate_serving,
)
from palm_search.search.screen import (
    SCREEN_LIMIT,
    SCREEN_PLANS,
    Screening,
    enqueue_screened,
    serving_front_first,
    start_screen,
)
from palm_search.search.space import Block, DegreeWalk, ServingWalk, SpaceBuilder, UsersBuilder, point_of
from palm_search.search.storage import (
    JOURNAL,
    Heartbeat,
    fail_stale,
    heartbeat_enabled,
    hold,
    journal_storage,
    rdb_storage,
    trial_id,
)
from palm_search.search.study import DEFAULT_TRIALS, SCREENED_TRIALS, StudySpec, spec_to_attrs
from simulator import (
    MEGATRON_CORE,
    Hardware,
    InputError,
    ModelSpec,
    Stack,
    Strategy,
    hardware_from_tables,
    hardware_tables,
    load_hardware,
    load_model,
    load_stack,
    strategy_fields,
)
from spaces import Candidate

logger = logging.getLogger(__name__)

warnings.filterwarnings("ignore", message="A worker stopped while some jobs were given", category=UserWarning)
# loky replaces a worker whose memory grew 300 MB past its first task (its memory-leak guard,
# ``_MAX_MEMORY_LEAK_SIZE``) and warns; a worker's caches of stage costs and flows grow that much
# on a 1,024-GPU cluster by design. The replacement takes the rest of the jobs, nothing is lost.


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
    storage: optuna.storages.BaseStorage
    """The storage the study was created or loaded with (heartbeats and trial ids go through it)."""
    build: SpaceBuilder | UsersBuilder
    jobs: int = 1
    deterministic: bool = True
    cache: dict[str, dict] = field(default_factory=dict)
    progress: Progress = field(default_factory=Progress)
    backend: str = "loky"
    """joblib backend the simulations run on: ``loky`` (local processes) or ``dask`` (a cluster)."""
    evaluator: Callable[..., dict] = evaluate
    """``(model, hardware, strategy, network) -> record``; a module-level function (it is pickled),
    bound to the study's stack by :func:`functools.partial` where that is not the default."""
    stack: Stack = MEGATRON_CORE
    """The software stack of the study (``StudySpec.stack``), in the cache keys."""
    interrupted: bool = False
    """Set (e.g. by SIGINT) to stop asking: in-flight trials are told, then the run ends."""
    running: dict[int, int] = field(default_factory=dict)
    """Trial number to storage trial id of the trials this process holds RUNNING, kept when the
    storage has heartbeats (a :class:`Heartbeat` beats them; see :func:`.storage.hold`)."""
    points: list[dict] | None = None
    """The exhaustive walk's parameter sets (None when a sampler proposes the points)."""
    screened: Screening | None = None
    """The screen of the space's points with the estimate, under way (``fidelity`` screen; see
    :mod:`.screen`)."""


METRIC_NAMES = {"throughput": "samples/s", "memory": "peak memory per device (GiB)"}
"""What each objective's value is, as the study names it (optuna-dashboard labels its axes so)."""
SERVING_METRIC_NAMES = {"throughput": "system tokens/s (decode)", "memory": "peak memory per device (GiB)",
                        "tokens_per_s_per_user": "tokens/s per user (decode)"}
"""The same for a serving study (``mode = "inference"``)."""


def metric_names(spec: StudySpec) -> list[str]:
    """The study's objective names, one per objective."""
    names = SERVING_METRIC_NAMES if spec.serving else METRIC_NAMES
    return [names[o] for o in spec.objectives]


def serving_target(spec: StudySpec) -> ServingTarget | None:
    """The serving study's floor and ceiling, or None (training, or neither given)."""
    if not spec.serving or (spec.min_tokens_per_s_per_user is None and spec.max_ttft_s is None):
        return None
    return ServingTarget(spec.min_tokens_per_s_per_user, spec.max_ttft_s)


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
                deterministic: bool = True) -> Search:
    """Load the model and machine, pre-screen the space's plans for memory on ``jobs`` workers
    (:meth:`DegreeWalk.prescreen`), open (or resume) the study, enqueue the exhaustive walk or
    start the screen (:func:`.screen.start_screen`, on the workers of the joblib backend in use).

    With sampler ``exhaustive`` (or ``auto`` when the space has at most ``trials`` points) the
    walk's first points are enqueued, as many as the budget holds beside the baseline (the budget
    shrinks to the points plus the baseline where they are fewer).

    Raises:
        InputError: bad model, hardware, study values or storage.
    """
    model, hardware = load_model(spec.model), load_hardware(spec.hardware)
    walk = ServingWalk(spec, model, hardware) if spec.serving else DegreeWalk(spec, model, hardware)
    known = storage_for(run_dir, storage) if storage or (run_dir / JOURNAL).is_file() else None
    target, stack = serving_target(spec), load_stack(spec.stack)
    walk.prescreen(jobs)
    points, screened = _walks(spec, model, walk, None if known and _queued(known, spec.name) else jobs, target, stack)
    build = walk.builder()
    if target is not None and screened is not None and screened.running is not None:
        _check_target(spec, screened)
    spec = spec.replace(trials=spec.trials or (SCREENED_TRIALS if screened is not None else DEFAULT_TRIALS))
    if points is not None:
        spec = spec.replace(trials=min(spec.trials, len(points) + 1))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    opened = known or storage_for(run_dir, storage)
    study = optuna.create_study(study_name=spec.name, storage=opened,
                                sampler=make_sampler(spec, points is not None or screened is not None),
                                directions=spec.directions, load_if_exists=True)
    evaluator = evaluate_serving if spec.serving else evaluate
    search = Search(spec=spec, model=model, hardware=hardware, study=study, storage=opened, build=build, jobs=jobs,
                    deterministic=deterministic, stack=stack,
                    evaluator=evaluator if stack == MEGATRON_CORE else partial(evaluator, stack=stack))
    search.points, search.screened = points, screened
    if not study.trials or study.metric_names is None:  # a study begun without them gets them on resuming
        with warnings.catch_warnings():  # experimental since Optuna 3.2, unchanged through 5
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(metric_names(spec))
    if not study.trials:
        study.set_user_attr("spec", spec_to_attrs(spec))
        sampler = "exhaustive" if points is not None else f"screen ({spec.network})" if screened else spec.sampler
        study.set_user_attr("sampler", sampler)
        if build.prescreen is not None:
            study.set_user_attr("memory_prescreen", build.prescreen)
    load_cache(search)
    return search


def _check_target(spec: StudySpec, screened: Screening) -> None:
    """Wait for the screen's estimates and check some point meets the serving target (before
    the study's storage exists, so a target nothing meets leaves no run directory).

    Raises:
        InputError: no point's estimate meets the floor or the ceiling.
    """
    ranked, _ = screened.ranked()
    if not ranked.positive():
        given = (("--min-tokens-per-s-per-user", spec.min_tokens_per_s_per_user), ("--max-ttft-s", spec.max_ttft_s))
        bounds = [f"{name} {value:g}" for name, value in given if value is not None]
        raise InputError(f"study: no mapping of the {len(ranked):,} screened (users {list(spec.users)}) meets"
                         f" {' and '.join(bounds)} by the closed-form estimate; lower the floor or raise the ceiling")


def _queued(storage: optuna.storages.BaseStorage, name: str) -> bool:
    """Whether the study ``name`` exists in ``storage`` and has queued its points already."""
    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        return False
    return bool(storage.get_study_user_attrs(study_id).get("enqueued"))


Walked = tuple[list[dict] | None, Screening | None]
"""What :func:`_walks` returns: the exhaustive walk's points, or the screen of the walk."""


def _walks(spec: StudySpec, model: ModelSpec, walk: DegreeWalk | ServingWalk, jobs: int | None,
           target: ServingTarget | None = None, stack: Stack = MEGATRON_CORE) -> Walked:
    """(the exhaustive walk, the screen of the walk): the walk when the sampler is exhaustive, or
    ``auto`` and the space fits the budget; else the screen of its blocks, started on ``jobs``
    workers (None: the points only, the study queued them already), when the fidelity allows and
    the space has at most :data:`SCREEN_LIMIT` points and :data:`SCREEN_PLANS` plans (a space
    where more plans fit memory is not walked: :meth:`DegreeWalk.fitting_plans`); else
    neither (a sampler proposes). A serving ``target`` is screened even when the space fits the
    budget (the points that miss it are not simulated).

    Raises:
        InputError: ``fidelity`` screen on a space larger than :data:`SCREEN_LIMIT` or :data:`SCREEN_PLANS`.
    """
    if spec.sampler == "exhaustive":
        return _at_most(iter(walk), 10**6), None
    if spec.sampler != "auto" or (spec.trials == 1 and target is None):  # one trial, the baseline's: no screen
        return None, None
    budget = spec.trials or DEFAULT_TRIALS
    blocks = walk.blocks()
    head = _blocks_past(blocks, budget)
    if sum(len(b) for b in head) <= budget and (target is None or spec.fidelity == "full"):
        return [params for block in head for params, _ in block.points()], None
    limit, screened = max(budget, SCREEN_LIMIT), None
    screenable = spec.fidelity != "full" and walk.fitting_plans() <= SCREEN_PLANS
    if screenable and jobs is None:
        held = head + _blocks_past(blocks, limit - sum(len(b) for b in head))
        fits = sum(len(b) for b in held) <= limit and sum(len(b.plans) for b in held) <= SCREEN_PLANS
        screened = Screening(held, [], None, 0.0) if fits else None
    elif screenable:
        screened = start_screen(model, chain(head, blocks), limit, jobs, target=target, stack=stack)
    if screened is None and spec.fidelity == "screen":
        raise InputError(f"study: the space has more than {SCREEN_LIMIT:,} points or {SCREEN_PLANS:,} plans, too many"
                         " to screen; fix some dimensions or use fidelity \"full\"")
    return None, screened


def _blocks_past(blocks: Iterator[Block], points: int) -> list[Block]:
    """The walk's next blocks until they hold more than ``points`` points (or it ends)."""
    taken: list[Block] = []
    held = 0
    while held <= points:
        block = next(blocks, None)
        if block is None:
            break
        taken.append(block)
        held += len(block)
    return taken


def _at_most(walk: Iterator[tuple[dict, Candidate]], limit: int) -> list[dict] | None:
    """The parameters of the walk's points, or None if it has more than ``limit``."""
    points = [params for params, _ in islice(walk, limit + 1)]
    return points if len(points) <= limit else None


def enqueue_points(search: Search) -> None:
    """Queue the exhaustive walk's points, or the best screened ones (:mod:`.screen`), once per
    study, after the baseline trial (whose ``ask`` would otherwise take the first of them)."""
    study = search.study
    if study.user_attrs.get("enqueued") or (search.points is None and search.screened is None):
        return
    if search.points is not None:  # the budget's first points (the baseline is a trial of it)
        for params in search.points[:search.spec.trials - 1]:
            study.enqueue_trial(params)
    elif search.screened is not None and search.spec.trials > 1:
        ranked, seconds = search.screened.ranked()
        if search.spec.serving and "tokens_per_s_per_user" in search.spec.objectives:
            ranked = serving_front_first(ranked)
        enqueue_screened(study, ranked, search.spec.trials - 1, seconds)
    study.set_user_attr("enqueued", True)


def candidate_of(search: Search, trial: optuna.trial.FrozenTrial) -> Candidate:
    """The candidate a told trial evaluated: its ``strategy`` on the study's machine, or on the
    machine of its ``machine`` attribute (a hardware variant, as :func:`tell` stores it)."""
    machine = trial.user_attrs.get("machine")
    hardware = (hardware_from_tables(machine, trial.user_attrs["hardware"], f"trial {trial.number}: machine")
                if machine else search.hardware)
    return Candidate(hardware=hardware, strategy=Strategy.from_dict(trial.user_attrs["strategy"]))


def key_of(search: Search, candidate: Candidate) -> str:
    """The cache key of evaluating ``candidate`` in this search."""
    return cache_key(search.model, candidate.hardware, candidate.strategy, search.spec.network, search.stack)


def load_cache(search: Search) -> None:
    """Fill the cache from the study's completed trials (a resumed study simulates nothing twice)."""
    for trial in search.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if "strategy" in trial.user_attrs:
            key = key_of(search, candidate_of(search, trial))
            search.cache[key] = {k: trial.user_attrs.get(k) for k in RECORD_KEYS}
            if search.spec.serving:
                search.cache[key].update({k: trial.user_attrs.get(k) for k in SERVING_KEYS})


def objective_values(spec: StudySpec, record: dict) -> list[float]:
    """Objective values of a record: samples/s (serving: system tokens/s) and tokens/s per user
    (0 when infeasible), and peak memory (GiB)."""
    feasible = bool(record["feasible"])
    throughput = record["tokens_per_s"] if spec.serving else record["samples_per_s"]
    values = {"throughput": throughput if feasible else 0.0, "memory": record["peak_memory_bytes"] / 2**30,
              "tokens_per_s_per_user": record.get("tokens_per_s_per_user", 0.0) if feasible else 0.0}
    return [values[o] for o in spec.objectives]


def judged(spec: StudySpec, record: dict) -> tuple[dict, dict[str, float]]:
    """A serving record checked against the study's target: infeasible with the reason when it
    misses it, and the target's Optuna constraint values (none without a target)."""
    target = serving_target(spec)
    if target is None:
        return record, {}
    per_user, ttft_s = record["tokens_per_s_per_user"], record["ttft_s"]
    shortfall = {k: v for k, v in target.shortfall(per_user, ttft_s).items() if math.isfinite(v)}
    if record["feasible"] and not target.met(per_user, ttft_s):
        record = {**record, "feasible": False, "reason": target.reason(per_user, ttft_s)}
    return record, shortfall


def tell(search: Search, trial: optuna.Trial, candidate: Candidate | None, record: dict, cached: bool,
         baseline: bool = False) -> None:
    """Record ``record`` on ``trial`` and finish it (COMPLETE, or FAIL on error). The trial keeps
    the candidate's strategy, and its machine's tables when it is not the study's machine."""
    study, progress = search.study, search.progress
    constraints: dict[str, float] = {}
    if search.spec.serving and not record.get("error"):
        record, constraints = judged(search.spec, record)
    if candidate is not None:
        trial.set_user_attr("strategy", candidate.strategy.to_dict())
        for name, value in readable_params(candidate.strategy).items():
            trial.set_user_attr(name, value)
        if candidate.hardware != search.hardware:
            trial.set_user_attr("hardware", candidate.hardware.name)
            trial.set_user_attr("machine", hardware_tables(candidate.hardware))
    for key in RECORD_KEYS + SERVING_KEYS:
        if key in record:
            trial.set_user_attr(key, record[key])
    trial.set_user_attr("cached", cached)
    trial.set_user_attr("baseline", baseline)
    search.running.pop(trial.number, None)
    progress.done += 1
    if record.get("error"):
        progress.failed += 1
        study.tell(trial, state=TrialState.FAIL)
        return
    with warnings.catch_warnings():  # a trial re-evaluated after an interrupted run has it already (same value)
        warnings.filterwarnings("ignore", message="The constraint value is ignored")
        trial.set_constraint("memory_over_capacity_bytes", record["memory_over_capacity_bytes"])
        for name, value in constraints.items():
            trial.set_constraint(name, value)
    progress.feasible += bool(record["feasible"])
    progress.cached += cached
    throughput = record["tokens_per_s"] if search.spec.serving else record["samples_per_s"]
    progress.best = max(progress.best, throughput if record["feasible"] else 0.0)
    study.tell(trial, objective_values(search.spec, record))


def readable_params(strategy: Strategy) -> dict:
    """The strategy's searched fields by their own names (``tp``, ``schedule``, ``zero_stage``...),
    which every trial, the baseline included, stores as user attributes: what a
    person reads in optuna-dashboard beside the sampler's encoded parameters."""
    as_dict = strategy.to_dict()
    return {name: as_dict.get(name) for name in strategy_fields(column=True)}


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
    candidate = Candidate(hardware=search.hardware, strategy=baseline)
    record = search.evaluator(search.model, search.hardware, baseline, search.spec.network, search.spec.eval_timeout_s)
    params = point_of(search.build, baseline)
    if params is None:  # outside the space: a trial without parameters (absent from the dashboard's plots)
        trial = search.study.ask(fixed_distributions={})
    else:  # its point of the space, so the dashboard's plots show it beside the others
        search.study.enqueue_trial(params)
        trial = search.study.ask()
        search.build(trial)
    search.cache[key_of(search, candidate)] = record
    tell(search, trial, candidate, record, cached=False, baseline=True)
    enqueue_points(search)


def _stale(search: Search) -> list[optuna.Trial]:
    """Trials an interrupted driver left RUNNING, reopened to be evaluated again (journal storage).
    With heartbeats (RDB) RUNNING trials may belong to live workers: only the stale ones are failed
    and queued again as WAITING copies, which ``study.ask()`` returns first."""
    study = search.study
    if heartbeat_enabled(search.storage):
        fail_stale(study, search.storage)
        return []
    numbers = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    return [optuna.Trial(study, trial_id(search.storage, study, n)) for n in numbers]


def optimize(search: Search, on_progress: Callable[[Progress], None] = lambda p: None) -> None:
    """Ask, evaluate and tell until the study holds ``spec.trials`` finished trials."""
    enqueue_points(search)
    search.progress.total = search.spec.trials
    search.progress.done = _finished(search.study)
    pending = _stale(search)
    runner = _run_batches if search.deterministic else _run_streaming
    if not heartbeat_enabled(search.storage):
        runner(search, pending, on_progress)
        return
    with Heartbeat(search.storage, search.running):
        runner(search, pending, on_progress)


def _asked(search: Search, pending: list[optuna.Trial], budget: int) -> Iterator[optuna.Trial]:
    """Reopened stale trials first, then fresh ones, ``budget`` in all."""
    for _ in range(budget):
        if search.interrupted:
            return
        trial = pending.pop(0) if pending else search.study.ask()
        hold(search.storage, search.study, trial.number, search.running)
        yield trial


def _budget(search: Search, pending: list[optuna.Trial], in_flight: int = 0) -> int:
    """Trials still to ask: what the study lacks (stale ones included) less the ``in_flight``
    ones asked but not told, at least the stale ones."""
    return max(search.spec.trials - _finished(search.study) - in_flight, len(pending))


@dataclass(frozen=True, slots=True)
class Asked:
    """An asked trial decoded: its candidate and cache key (None when the space could not build
    one), and the record already known (cached, or the decoding error) or None to simulate."""

    trial: optuna.Trial
    candidate: Candidate | None
    key: str | None
    known: dict | None


def decode(search: Search, trial: optuna.Trial) -> Asked:
    """The step every evaluator (driver or worker) takes after ``ask``: build the trial's
    candidate and look it up in the cache."""
    try:
        candidate = search.build(trial)
    except InputError as error:
        return Asked(trial, None, None, {"error": f"InputError: {error}"})
    key = key_of(search, candidate)
    return Asked(trial, candidate, key, search.cache.get(key))


def finish(search: Search, asked: Asked, record: dict, on_progress: Callable[[Progress], None]) -> None:
    """The step after evaluating: cache the record, tell the trial, report progress."""
    cached = asked.known is not None and asked.key is not None
    if asked.key is not None and not record.get("error"):
        search.cache.setdefault(asked.key, record)
    tell(search, asked.trial, asked.candidate, record, cached)
    on_progress(search.progress)


def run_here(search: Search, candidate: Candidate) -> dict:
    """Evaluate ``candidate`` in this process."""
    return search.evaluator(search.model, candidate.hardware, candidate.strategy, search.spec.network,
                            search.spec.eval_timeout_s)


def _task(search: Search, candidate: Candidate) -> Any:
    """The joblib task evaluating ``candidate``."""
    return delayed(search.evaluator)(search.model, candidate.hardware, candidate.strategy, search.spec.network,
                                     search.spec.eval_timeout_s)


@dataclass
class _Flight:
    """A batch in flight: its decoded trials, the strategies it simulates (by cache key) and
    their running simulations."""

    batch: list[Asked]
    todo: dict[str, Candidate]
    running: Iterator[dict]


IN_FLIGHT_BLIND = 3
"""Batches in flight when the sampler proposes without learning from results (random; the
exhaustive walk's and the screen's queued points): enough that the workers do not wait while
the driver tells one batch, few enough that Ctrl-C waits for a few simulations per worker."""


def _run_batches(search: Search, pending: list[optuna.Trial], on_progress: Callable[[Progress], None]) -> None:
    """Synchronous batches, told in order, several in flight. With a sampler that learns (TPE,
    NSGA-II) two are: batch k+1 is asked (with batch k pending, as constant liar sees it) and
    queued behind batch k; when batch k's records are in, it is told and batch k+2 is asked
    while the workers simulate batch k+1. What the sampler knows at each ask (the batches before
    k told, k pending) is the same for any number of workers. A sampler that does not learn
    proposes the same points whatever it was told, so :data:`IN_FLIGHT_BLIND` batches are in
    flight. Either way the workers do not wait while the driver tells and asks."""
    depth = 2 if _learns(search.study.sampler) else IN_FLIGHT_BLIND
    flights: deque[_Flight] = deque()
    simulated: dict[str, dict] = {}
    while True:
        while len(flights) < depth:
            batch = _ask_batch(search, pending, in_flight=sum(len(f.batch) for f in flights))
            if not batch:
                break
            flights.append(_launch(search, batch, flights))
        if not flights:
            return
        _land(search, flights.popleft(), list(flights), simulated, on_progress)


def _learns(sampler: optuna.samplers.BaseSampler) -> bool:
    """Whether the sampler's proposals depend on the results told (all but random sampling)."""
    return not isinstance(sampler, optuna.samplers.RandomSampler)


def _launch(search: Search, batch: list[Asked], ahead: Iterable[_Flight]) -> _Flight:
    """Start simulating ``batch``'s strategies that are neither cached nor simulated by a
    batch ``ahead`` (each distinct strategy once)."""
    batch = [replace(a, known=search.cache.get(a.key)) if a.known is None and a.key else a for a in batch]
    simulating = {key for flight in ahead for key in flight.todo}
    todo = {a.key: a.candidate for a in batch
            if a.known is None and a.candidate is not None and a.key not in simulating}
    return _Flight(batch, todo, _dispatch(search, list(todo.values())))


def _land(search: Search, flight: _Flight, behind: list[_Flight], simulated: dict[str, dict],
          on_progress: Callable[[Progress], None]) -> None:
    """Collect ``flight``'s records into ``simulated`` (the records of the batches landed before)
    and tell its trials in order; a strategy a batch ahead simulated is told with that record, as
    cached. The batches ``behind`` it are in flight too."""
    simulated.update(zip(flight.todo, _collect(search, flight, behind), strict=True))
    for asked in flight.batch:
        if asked.known is None and asked.key not in flight.todo:
            asked = replace(asked, known=simulated[asked.key])
        finish(search, asked, asked.known or simulated[asked.key], on_progress)


def _ask_batch(search: Search, pending: list[optuna.Trial], in_flight: int) -> list[Asked]:
    """The next batch, asked and decoded (empty once the budget, less ``in_flight``, is asked)."""
    budget = _budget(search, pending, in_flight)
    if search.interrupted or budget <= 0:
        return []
    return [decode(search, t) for t in _asked(search, pending, min(search.spec.batch_size, budget))]


def _dispatch(search: Search, candidates: list[Candidate]) -> Iterator[dict]:
    """Start simulating ``candidates`` (records come in order; with one job, as they are read)."""
    if not candidates:
        return iter(())
    return _parallel(search, return_as="generator", pre_dispatch="all")(_task(search, c) for c in candidates)


def _collect(search: Search, flight: _Flight, behind: list[_Flight]) -> list[dict]:
    """The records of ``flight``'s simulations; if a worker process dies, each is retried alone,
    once the batches ``behind`` (in flight too) have finished, so that none of their strategies
    kills a retry's worker."""
    try:
        return list(flight.running)
    except _worker_deaths(search) as error:
        logger.warning("a simulator worker process died (%s); retrying its batch one strategy at a time", error)
        for k, later in enumerate(behind):
            later.running = iter(_collect(search, later, behind[k + 1:]))
        return [_isolated(search, c) for c in flight.todo.values()]


def _isolated(search: Search, candidate: Candidate) -> dict:
    """Evaluate ``candidate`` alone in a fresh worker process: if that process dies too, the death
    is the candidate's, and it becomes the record's error (its trial FAILs; the search goes on)."""
    try:
        [record] = _parallel(search, n_jobs=2)([_task(search, candidate)])
        return record
    except _worker_deaths(search) as error:
        return {"error": f"worker process died: {type(error).__name__}: {' '.join(str(error).split())[:300]}"}


def _parallel(search: Search, n_jobs: int | None = None, **options: Any) -> Parallel:
    """A ``Parallel`` on the search's backend (``n_jobs``: default the search's jobs) with a
    backend instance of its own: two batches are in flight, and the one instance that
    ``parallel_config(backend="dask")`` shares between calls would mix their results (the
    executor made the Dask client: :class:`palm_search.search.run_control.Executor`)."""
    if search.backend != "dask":
        return Parallel(n_jobs=n_jobs or search.jobs, backend=search.backend, **options)
    with parallel_config(backend="dask"):
        return Parallel(n_jobs=n_jobs or search.jobs, **options)


def _worker_deaths(search: Search) -> tuple[type[BaseException], ...]:
    """Exceptions by which a joblib backend reports a dead worker process."""
    if search.backend == "dask":
        from distributed import KilledWorker

        return TerminatedWorkerError, KilledWorker
    return (TerminatedWorkerError,)


def _run_streaming(search: Search, pending: list[optuna.Trial], on_progress: Callable[[Progress], None]) -> None:
    """Keep every worker busy: ask lazily as joblib pulls tasks, tell in completion order. If a
    worker process dies, the trials in flight are evaluated again one at a time and the stream
    goes on in a new pool."""
    waiting: dict[int, Asked] = {}
    while True:
        try:
            _stream(search, pending, waiting, on_progress)
            return
        except _worker_deaths(search) as error:
            logger.warning("a simulator worker process died (%s); retrying %d in-flight trials one at a time",
                           error, len(waiting))
            for number in list(waiting):
                asked = waiting.pop(number)
                finish(search, asked, _isolated(search, asked.candidate), on_progress)


def _stream(search: Search, pending: list[optuna.Trial], waiting: dict[int, Asked],
            on_progress: Callable[[Progress], None]) -> None:
    known: list[Asked] = []

    def tasks() -> Iterator[Any]:
        for trial in _asked(search, pending, _budget(search, pending)):
            asked = decode(search, trial)
            if asked.known is not None:
                known.append(asked)
                continue
            waiting[trial.number] = asked
            yield delayed(_numbered)(search.evaluator, trial.number, search.model, asked.candidate,
                                     search.spec.network, search.spec.eval_timeout_s)

    stream = _parallel(search, return_as="generator_unordered", pre_dispatch=str(2 * max(search.jobs, 1)))(tasks())
    for number, record in stream:
        while known:
            asked = known.pop(0)
            finish(search, asked, asked.known, on_progress)
        finish(search, waiting.pop(number), record, on_progress)
    for asked in known:
        finish(search, asked, asked.known, on_progress)


def _numbered(evaluator: Callable[..., dict], number: int, model: ModelSpec, candidate: Candidate,
              network: str, time_limit_s: float) -> tuple[int, dict]:
    """Worker task: the trial number with its evaluation record."""
    return number, evaluator(model, candidate.hardware, candidate.strategy, network, time_limit_s)
