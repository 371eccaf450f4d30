"""The run directory's journal file, fsynced once per change of a trial's state instead of once
per record.

Optuna's :class:`~optuna.storages.journal.JournalFileBackend` fsyncs every record it appends, and
a told trial writes about 27 of them (its parameters, one record per user attribute, its state):
1,345 fsyncs in the default ``optimize`` run, each 0.07 ms on this machine's disk but 1-10 ms on
many others. :class:`TrialSyncedJournalBackend` writes and flushes a record of
:data:`UNSYNCED_OPERATIONS` under the same lock without an fsync, so the record is in the file at
once (every process reads it; a killed driver loses nothing), and the trial's next synced record
(its ask or tell) makes it durable with the one fsync of the file: about 2 per trial. Only an
operating-system crash between the two could lose the unsynced attributes of a trial that is
still RUNNING, which a resumed run evaluates again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from optuna.storages.journal import BaseJournalBackend, JournalFileBackend, JournalFileSymlinkLock


def _unsynced_operations() -> frozenset[int]:
    """The op codes of the journal records written without an fsync of their own: what a trial
    records before its state changes (its parameters, intermediate values, user and system
    attributes). Creating, asking and telling a trial, and every study-level operation, are synced.

    The one use of a private Optuna name in palm_search: Optuna 5.0.0 names the journal's op codes
    (its on-disk format) only in ``optuna.storages.journal._storage.JournalOperation``; no public
    API names them, and the public ``BaseJournalBackend.append_logs`` receives them as bare ints.
    """
    from optuna.storages.journal._storage import JournalOperation as Operation

    return frozenset({Operation.SET_TRIAL_PARAM, Operation.SET_TRIAL_INTERMEDIATE_VALUE,
                      Operation.SET_TRIAL_USER_ATTR, Operation.SET_TRIAL_SYSTEM_ATTR})


UNSYNCED_OPERATIONS = _unsynced_operations()
"""Journal op codes written without an fsync of their own (:func:`_unsynced_operations`)."""


class TrialSyncedJournalBackend(BaseJournalBackend):
    """Optuna's journal file at ``path``, locked by ``lock``, fsynced only by the records that
    create a trial or change its state (or a study's)."""

    def __init__(self, path: Path, lock: JournalFileSymlinkLock) -> None:
        self.path, self.lock = path, lock
        self.synced = JournalFileBackend(str(path), lock_obj=lock)

    def read_logs(self, log_number_from: int) -> Iterable[dict[str, Any]]:
        return self.synced.read_logs(log_number_from)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        if any(log["op_code"] not in UNSYNCED_OPERATIONS for log in logs):
            self.synced.append_logs(logs)
            return
        text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs)
        self.lock.acquire()
        try:
            with self.path.open("ab") as file:
                file.write(text.encode())
        finally:
            self.lock.release()
