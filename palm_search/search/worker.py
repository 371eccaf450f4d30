"""``palm-search worker``: one more process working on a study kept in an RDB (PostgreSQL).

Start the study once (``palm-search optimize --storage URL ...`` stores the whole
:class:`~palm_search.search.study.StudySpec` in ``study.user_attrs["spec"]`` and evaluates the
baseline), then run any number of workers, on one host or many, each with its own ask / evaluate /
tell loop on the same study::

    palm-search worker --storage postgresql+psycopg2://palm@db:5432/palm --study t-145b-wafer

What several workers guarantee together:

* Budget: the study ends with ``trials`` counted trials (:func:`palm_search.search.driver.counted`:
  COMPLETE, or FAIL from an evaluation error). Before asking, a worker looks at the counted and
  RUNNING trials; after asking, a trial whose rank among them (by trial number) is past the budget
  lost a race with another worker and is told PRUNED with ``user_attrs["over_budget"]``: it is
  neither evaluated nor counted.
* Dead workers: each worker beats a heartbeat for its RUNNING trial (:mod:`palm_search.search.storage`);
  every worker fails the stale trials of dead ones before it asks, and Optuna queues a WAITING
  copy that the next ask returns. A worker waits (rather than leaving) while the budget is only
  reached by trials still RUNNING, so a trial of a worker that dies late is still retried.
* No duplicates: a trial number is told once (Optuna refuses a second tell); a trial abandoned
  by a dead worker is FAIL without ``error`` and its retry is counted instead, so no trial is
  counted twice; a strategy already COMPLETE in the study is not simulated again (the cache is
  reloaded from the study before each evaluation, the trial says ``cached``). Two workers may
  still simulate the same new strategy at the same time: neither knows the other's result yet.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

import optuna
from optuna.trial import TrialState

from palm_search.search.driver import Progress, Search, counted, decode, finish, load_cache, make_sampler, run_here
from palm_search.search.space import candidate_builder
from palm_search.search.storage import (
    GRACE_PERIOD_S,
    HEARTBEAT_INTERVAL_S,
    Heartbeat,
    fail_stale,
    hold,
    rdb_storage,
)
from palm_search.search.study import spec_from_attrs
from simulator import InputError, load_hardware, load_model


def open_worker(url: str, study_name: str, trials: int | None = None,
                heartbeat_interval: int = HEARTBEAT_INTERVAL_S, grace_period: int = GRACE_PERIOD_S) -> Search:
    """Load the study ``study_name`` from ``url`` and rebuild its spec, model, machine and space.

    Raises:
        InputError: unreachable storage, no such study, or a study without a stored spec.
    """
    storage = rdb_storage(url, heartbeat_interval=heartbeat_interval, grace_period=grace_period)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        raise InputError(f"worker: no study {study_name!r} in the storage (it holds {names}); "
                         "create it with palm-search optimize --storage URL") from None
    spec = spec_from_attrs(study.user_attrs.get("spec", {})).replace(trials=trials)
    model, hardware = load_model(spec.model), load_hardware(spec.hardware)
    study.sampler = make_sampler(spec, study.user_attrs.get("sampler") == "exhaustive")
    search = Search(spec=spec, model=model, hardware=hardware, study=study, storage=storage,
                    build=candidate_builder(spec, model, hardware), jobs=1)
    load_cache(search)
    return search


def run_worker(search: Search, on_progress: Callable[[Progress], None] = lambda p: None) -> int:
    """Ask, evaluate (in this process) and tell until the study holds ``spec.trials`` counted
    trials and none is RUNNING; return how many trials this worker told."""
    study, budget, told = search.study, search.spec.trials, 0
    identity = f"{socket.gethostname()}:{os.getpid()}"
    search.progress.total = budget
    with Heartbeat(search.storage, search.running) as heartbeat:
        while not search.interrupted:
            fail_stale(study, search.storage)
            trials = study.get_trials(deepcopy=False)
            search.progress.done = done = sum(counted(t) for t in trials)
            running = sum(t.state == TrialState.RUNNING for t in trials)
            if done >= budget and not running:
                _drop_surplus(study, sum(t.state == TrialState.WAITING for t in trials))
                break
            if done + running >= budget and not any(t.state == TrialState.WAITING for t in trials):
                time.sleep(min(heartbeat.interval, 1))  # others finish (or die and are retried)
                continue
            trial = study.ask()
            hold(search.storage, study, trial.number, search.running)
            trial.set_user_attr("worker", identity)
            if _over_budget(study, trial.number, budget):
                search.running.pop(trial.number, None)
                trial.set_user_attr("over_budget", True)
                study.tell(trial, state=TrialState.PRUNED)
                continue
            load_cache(search)
            asked = decode(search, trial)
            record = asked.known
            if record is None and asked.candidate is not None:
                record = run_here(search, asked.candidate)
            finish(search, asked, record, on_progress)
            told += 1
    return told


def _over_budget(study: optuna.Study, number: int, budget: int) -> bool:
    """Whether ``budget`` counted or RUNNING trials precede trial ``number``."""
    ahead = sum(1 for t in study.get_trials(deepcopy=False)
                if t.number < number and (counted(t) or t.state == TrialState.RUNNING))
    return ahead >= budget


def _drop_surplus(study: optuna.Study, waiting: int) -> None:
    """Tell PRUNED (``over_budget``) the WAITING retries left once the budget is full, so no trial
    stays WAITING (a retry queued while the others filled the budget)."""
    for _ in range(waiting):
        trial = study.ask()
        trial.set_user_attr("over_budget", True)
        study.tell(trial, state=TrialState.PRUNED)
