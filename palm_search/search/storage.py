"""Where a study lives, and how its processes prove they are alive.

* No URL: a journal file ``RUN_DIR/study.journal`` (one host; no heartbeat, so a trial an
  interrupted driver left RUNNING is reopened when the same command runs again).
* An RDB URL (``postgresql+psycopg2://user@host:port/db``, ``sqlite:///file.db``...): an
  :class:`optuna.storages.RDBStorage` with Optuna heartbeats. Every process that evaluates trials
  (the ``optimize`` driver, each ``worker``) records a heartbeat for its RUNNING trials every
  ``heartbeat_interval`` seconds from a background thread (:class:`Heartbeat`). A trial whose
  heartbeat is older than ``grace_period`` belongs to a process that died: the next
  :func:`optuna.storages.fail_stale_trials` call (each worker calls it before asking) marks it
  FAIL and :class:`optuna.storages.RetryHeartbeatStaleTrialCallback` queues a WAITING copy with
  the same parameters, which the next ``study.ask()`` picks up. So no trial stays RUNNING.

Raises of this module are :class:`simulator.InputError` with one line (a bad URL, an unreachable
server, a corrupt journal), never a driver traceback.
"""

from __future__ import annotations

import logging
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from simulator import InputError

if TYPE_CHECKING:  # optuna is imported where used: `palm-search simulate` starts without it
    import optuna
    from optuna.storages import BaseStorage, RDBStorage

JOURNAL = "study.journal"
ARTIFACTS = "artifacts"
"""The run directory's Optuna artifact store (the mappings' pictures and traces)."""
HEARTBEAT_INTERVAL_S = 5
"""Seconds between two heartbeats of a RUNNING trial (Optuna wants an integer)."""
GRACE_PERIOD_S = 30
"""Seconds without a heartbeat after which a RUNNING trial is taken as abandoned."""
MAX_RETRY = 3
"""Times a trial abandoned by a dead process is queued again before it stays FAIL."""

# Optuna warns at every ask that heartbeats are meant for Study.optimize; ask/tell processes beat
# themselves (Heartbeat below), so the warning says nothing here.
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


def rdb_storage(url: str, heartbeat_interval: int = HEARTBEAT_INTERVAL_S,
                grace_period: int = GRACE_PERIOD_S) -> RDBStorage:
    """An RDB storage with heartbeats and retry of abandoned trials.

    Raises:
        InputError: a URL SQLAlchemy cannot parse, a missing driver, or an unreachable server.
    """
    import optuna
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return RDBStorage(url, heartbeat_interval=heartbeat_interval, grace_period=grace_period,
                              heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY),
                              engine_kwargs={"pool_pre_ping": True} if not url.startswith("sqlite") else None)
    except Exception as error:  # noqa: BLE001 - sqlalchemy and driver errors become one line
        raise InputError(f"--storage {_hide_password(url)}: {_one_line(error)}") from None


def journal_storage(run_dir: Path) -> optuna.storages.JournalStorage:
    """The run directory's journal file (created with the directory); an unterminated last
    record, left by an interrupted write, is dropped first (:func:`_drop_unfinished_record`).

    Raises:
        InputError: the journal is corrupt (a damaged record that Optuna cannot replay).
    """
    from optuna.storages import JournalStorage

    from palm_search.search.journal import TrialSyncedJournalBackend

    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / JOURNAL
    if path.is_file() and path.stat().st_size and not _ends_with_newline(path):
        _drop_unfinished_record(path)
    try:
        storage = JournalStorage(TrialSyncedJournalBackend(path, _journal_lock(path)))
        storage.get_all_studies()  # replays the whole log now, so damage shows here
        return storage
    except Exception as error:  # noqa: BLE001 - a damaged file is a user-facing condition
        raise InputError(f"{path}: corrupt or truncated journal ({_one_line(error)}); "
                         "restore it or use another --run-dir") from None


def heartbeat_enabled(storage) -> bool:
    """Whether ``storage`` (the storage a study was created or loaded with) keeps heartbeats."""
    return storage.get_heartbeat_interval() is not None if hasattr(storage, "get_heartbeat_interval") else False


class Heartbeat:
    """A daemon thread recording a heartbeat for each trial of ``trial_ids`` (a live mapping of
    trial number to storage trial id, which :func:`hold` adds to when a trial is asked and the
    caller removes from when it tells it)."""

    def __init__(self, storage, trial_ids: dict[int, int]) -> None:
        self.storage, self.trial_ids = storage, trial_ids
        self.interval = storage.get_heartbeat_interval()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="palm-search-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def beat(self) -> None:
        """Record one heartbeat for every trial in the set now."""
        for trial_id in list(self.trial_ids.values()):
            try:
                self.storage.record_heartbeat(trial_id)
            except Exception:  # noqa: BLE001, S110 - a missed beat is retried; never kill the process
                pass

    def _run(self) -> None:
        while not self._stop.wait(min(self.interval, 1)):
            self.beat()


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}"


def _hide_password(url: str) -> str:
    head, at, tail = url.rpartition("@")
    if not at or ":" not in head.split("//", 1)[-1]:
        return url
    scheme, _, user = head.partition("//")
    return f"{scheme}//{user.split(':', 1)[0]}:***@{tail}"


def fail_stale(study: optuna.Study, storage: BaseStorage) -> None:
    """FAIL (and queue again) the RUNNING trials whose heartbeat is older than the grace period
    (``storage``: the one ``study`` was created or loaded with)."""
    import optuna

    if heartbeat_enabled(storage):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)


def _drop_unfinished_record(path: Path) -> None:
    """Cut the journal's unterminated last record (a write interrupted by kill -9 or a full disk;
    Optuna would skip it as "being written", then append to it) under Optuna's own lock, and say
    so in one warning line (stderr, through :mod:`logging`). The records before it, every trial
    told before the interruption, are kept; the cut record's trial is evaluated again on resume."""
    lock = _journal_lock(path)
    lock.acquire()
    try:
        data = path.read_bytes()
        kept = data.rfind(b"\n") + 1
        with path.open("r+b") as file:
            file.truncate(kept)
    finally:
        lock.release()
    logging.getLogger(__name__).warning(f"{path}: dropped its unfinished last record ({len(data) - kept:,} bytes,"
                                        " left by an interrupted write); the records before it are kept")


STALE_LOCK_S = 5
"""A journal lock held this long (s) while the journal does not change is stale (a writer holds it
for one append, milliseconds; kill -9 during one leaves it): it is broken instead of waited on for
Optuna's default 30 s."""


def _journal_lock(path: Path):
    """Optuna's symlink lock of the journal ``path``, stale after :data:`STALE_LOCK_S`."""
    from optuna.storages.journal import JournalFileSymlinkLock

    return JournalFileSymlinkLock(str(path), grace_period=STALE_LOCK_S)


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as file:
        file.seek(-1, 2)
        return file.read(1) == b"\n"


def trial_id(storage: BaseStorage, study: optuna.Study, number: int) -> int:
    """The storage's id of ``study``'s trial ``number`` (what heartbeats and :class:`optuna.Trial`
    take), found with the storage's public lookups (``storage``: the one ``study`` was created or
    loaded with)."""
    return storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study.study_name), number)


def hold(storage: BaseStorage, study: optuna.Study, number: int, running: dict[int, int]) -> None:
    """Add trial ``number``, just asked, to ``running`` (trial number to storage trial id, what a
    :class:`Heartbeat` beats) and record its first heartbeat now, when ``storage`` keeps
    heartbeats: Optuna never takes a trial without any heartbeat as stale, so a process dying
    before its first periodic beat would leave it RUNNING. The caller removes it when told."""
    if heartbeat_enabled(storage):
        running[number] = trial_id(storage, study, number)
        storage.record_heartbeat(running[number])
