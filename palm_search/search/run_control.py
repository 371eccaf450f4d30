"""How a search runs: where the simulations execute (loky or a Dask cluster) and how Ctrl-C stops it.

* Executor ``loky`` (default): joblib's local worker processes, ``--jobs`` of them.
* Executor ``dask``: a :class:`distributed.Client` to ``--scheduler tcp://HOST:PORT`` (or a local
  cluster of ``--jobs`` single-threaded worker processes when no scheduler is given); the driver
  and its storage stay in this process, joblib sends each simulation to the cluster
  (``Parallel(backend="dask")``, see joblib's ``parallel_config``).
* SIGINT: the first Ctrl-C sets ``search.interrupted``: the driver asks no new trial, tells the
  ones in flight, and the command writes its outputs and exits with code 130; a second Ctrl-C
  stops at once (the trials left RUNNING are evaluated again when the same command resumes).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from simulator import InputError

EXECUTORS = ("loky", "dask")
INTERRUPTED_EXIT_CODE = 130
"""Exit code of a command stopped by SIGINT (128 + 2, as shells report it)."""


def check_executor(executor: str, scheduler: str | None) -> None:
    """Validate the executor flags (before anything is created).

    Raises:
        InputError: unknown executor, or a scheduler without ``--executor dask``.
    """
    if executor not in EXECUTORS:
        raise InputError(f"--executor must be one of {list(EXECUTORS)}, got {executor!r}")
    if scheduler is not None and executor != "dask":
        raise InputError(f"--scheduler {scheduler} needs --executor dask, got --executor {executor}")
    if scheduler is not None and "://" not in scheduler:
        raise InputError(f"--scheduler must be an address like tcp://HOST:PORT, got {scheduler!r}")


class Executor:
    """The joblib backend a search uses, with the Dask client it may own (:meth:`close` it)."""

    def __init__(self, executor: str, scheduler: str | None, jobs: int) -> None:
        """Connect to the cluster (dask) or do nothing (loky).

        Raises:
            InputError: bad flags, or no scheduler answering at ``scheduler``.
        """
        check_executor(executor, scheduler)
        self.backend, self.client, self._config = executor, None, None
        self._warming: Any = None
        if executor == "dask":
            from joblib import parallel_config

            self.client = _dask_client(scheduler, jobs)
            self._config = parallel_config(backend="dask")  # also registers joblib's dask backend
            self._config.__enter__()

    def warm_up(self, jobs: int) -> None:
        """Start the ``jobs`` local worker processes now, importing the simulator, while the driver
        opens the study and walks the space (1-2 s of process start-up taken off the screen's
        wall time; joblib reuses the pool). Nothing for Dask, whose workers are already up."""
        if self.backend == "loky" and jobs > 1:
            from joblib import Parallel, delayed

            self._warming = Parallel(n_jobs=jobs, return_as="generator")(delayed(_import_simulator)()
                                                                         for _ in range(jobs))

    def close(self) -> None:
        """Disconnect from (or shut down the local) Dask cluster."""
        if self._warming is not None:
            list(self._warming)
            self._warming = None
        if self._config is not None:
            self._config.__exit__(None, None, None)
            self._config = None
        if self.client is not None:
            cluster = self.client.cluster
            self.client.close()
            if cluster is not None:
                cluster.close()
            self.client = None


def _import_simulator() -> None:
    """A worker's warm-up task: import what every evaluation needs."""
    import palm_search.search.evaluate  # noqa: F401 - the simulator and the tasks, without Optuna or pandas


def _dask_client(scheduler: str | None, jobs: int):
    from distributed import Client, LocalCluster

    if scheduler is None:
        return Client(LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=None))
    try:
        return Client(scheduler, timeout="10s")
    except (OSError, TimeoutError) as error:
        raise InputError(f"--scheduler {scheduler}: no Dask scheduler answers ({type(error).__name__}: "
                         f"{' '.join(str(error).split())[:200]})") from None


@contextlib.contextmanager
def stop_on_sigint(search) -> Iterator[None]:
    """While inside, the first SIGINT sets ``search.interrupted``; the second raises
    KeyboardInterrupt. Does nothing outside the main thread (signals are delivered there only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame) -> None:
        if search.interrupted:
            raise KeyboardInterrupt
        search.interrupted = True

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    except KeyboardInterrupt:
        search.interrupted = True
    finally:
        signal.signal(signal.SIGINT, previous)
