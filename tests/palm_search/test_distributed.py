"""Beyond one process: PostgreSQL-backed studies shared by workers, and a Dask cluster.

The services are real and started here on loopback: a PostgreSQL server from Debian's package
(``tests/services/postgres.sh`` installs it with apt-get when missing) and a Dask scheduler and
worker as separate processes. If PostgreSQL cannot be installed or started the test fails with
the script's message; nothing is skipped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from typer.testing import CliRunner

from palm_search.commands.cli import app
from palm_search.search.storage import journal_storage

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
STUDY = DATA / "small-study.toml"
HW = DATA / "mini-mesh.toml"
POSTGRES = ROOT / "tests" / "services" / "postgres.sh"
CLI = [sys.executable, "-m", "palm_search"]
BUDGET = 24


@pytest.fixture(scope="module")
def postgres_url():
    directory = Path(tempfile.mkdtemp(prefix="palm-postgres-"))  # under /tmp: the postgres user can reach it
    started = subprocess.run(["bash", str(POSTGRES), "start", str(directory)], capture_output=True, text=True,
                             timeout=900)
    if started.returncode != 0:
        pytest.fail(f"PostgreSQL could not be installed or started: {started.stderr.strip()[-500:]}")
    yield started.stdout.strip().splitlines()[-1]
    subprocess.run(["bash", str(POSTGRES), "stop", str(directory)], capture_output=True, timeout=120)


def _worker(url: str) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "worker", "--storage", url, "--study", "small", "--trials", str(BUDGET),
                             "--heartbeat-interval", "1", "--grace-period", "2", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _kill_mid_trial(url: str, victim: subprocess.Popen) -> int | None:
    """SIGKILL ``victim`` while it holds a RUNNING trial; the trial's number, or None if it had
    already finished the trial when the signal landed (or never got one)."""
    storage = optuna.storages.RDBStorage(url)  # uncached: each poll is one query
    study_id = storage.get_study_id_from_name("small")
    deadline = time.monotonic() + 60
    while victim.poll() is None and time.monotonic() < deadline:
        running = storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
        mine = [t for t in running if t.user_attrs.get("worker", "").endswith(f":{victim.pid}")]
        if mine:
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            again = storage.get_trial(storage.get_trial_id_from_study_id_trial_number(study_id, mine[0].number))
            return mine[0].number if again.state == TrialState.RUNNING else None
        time.sleep(0.005)
    victim.kill()
    victim.wait()
    return None


@pytest.mark.slow
def test_two_workers_on_one_postgres_study_survive_one_killed_mid_trial(postgres_url, tmp_path):
    created = subprocess.run([*CLI, "optimize", "--study", str(STUDY), "--hw", str(HW), "--sampler", "random",
                              "--trials", "1", "--jobs", "1", "--storage", postgres_url,
                              "--run-dir", str(tmp_path / "r"), "--json"], capture_output=True, text=True, timeout=120)
    assert created.returncode == 0, created.stderr
    victim, survivor = _worker(postgres_url), _worker(postgres_url)  # started together
    killed = _kill_mid_trial(postgres_url, victim)
    for _ in range(4):  # a trial takes ~0.1 s: try again if the kill landed between two trials
        if killed is not None:
            break
        killed = _kill_mid_trial(postgres_url, _worker(postgres_url))
    assert killed is not None, "could not kill a worker while it held a RUNNING trial"
    out, err = survivor.communicate(timeout=120)
    assert survivor.returncode == 0, err
    assert json.loads(out)["counted"] == BUDGET
    assert re.search(rf"^trials \d+/{BUDGET} after \d+ s feasible", err, re.MULTILINE), err  # its progress, on stderr
    trials = optuna.load_study(study_name="small", storage=postgres_url).trials
    states = Counter(t.state for t in trials)
    assert states[TrialState.RUNNING] == 0 and states[TrialState.WAITING] == 0
    counted = [t for t in trials if t.state == TrialState.COMPLETE
               or (t.state == TrialState.FAIL and t.user_attrs.get("error"))]
    assert len(counted) == BUDGET
    # The killed trial was failed by the heartbeat (no evaluation error) and retried exactly once.
    assert trials[killed].state == TrialState.FAIL and not trials[killed].user_attrs.get("error")
    retries = Counter(t.system_attrs.get("failed_trial") for t in trials if "failed_trial" in t.system_attrs)
    assert retries[killed] == 1 and all(n == 1 for n in retries.values())
    assert any(t.system_attrs.get("failed_trial") == killed and t.state == TrialState.COMPLETE for t in trials)
    # No strategy simulated twice, unless the two simulations overlapped in time (neither knew).
    simulated: dict[str, list] = {}
    for t in counted:
        if not t.user_attrs.get("cached") and "strategy" in t.user_attrs:
            simulated.setdefault(json.dumps(t.user_attrs["strategy"], sort_keys=True), []).append(t)
    for same in simulated.values():
        same.sort(key=lambda t: t.datetime_start)
        for first, second in zip(same, same[1:], strict=False):
            assert second.datetime_start < first.datetime_complete, (first.number, second.number)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def dask_scheduler():
    port = _free_port()
    dask = shutil.which("dask", path=str(Path(sys.executable).parent)) or "dask"
    env = dict(os.environ)
    processes = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                   "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)]
    address = f"tcp://127.0.0.1:{port}"
    processes += [subprocess.Popen([dask, "worker", address, "--nworkers", "1", "--nthreads", "1", "--no-dashboard"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env) for _ in range(2)]
    from distributed import Client

    with Client(address, timeout="60s") as client:
        client.wait_for_workers(2, timeout=60)
    yield address
    for process in reversed(processes):
        process.terminate()
    for process in processes:
        process.wait(timeout=30)


def _history(run_dir: Path) -> list:
    storage = journal_storage(run_dir)
    [name] = optuna.get_all_study_names(storage)
    study = optuna.load_study(study_name=name, storage=storage)
    return [(t.number, t.params, t.values, t.state, t.user_attrs.get("samples_per_s")) for t in study.trials]


@pytest.mark.slow
def test_a_dask_cluster_gives_the_loky_results_with_the_same_seed(dask_scheduler, tmp_path):
    common = ["optimize", "--study", str(STUDY), "--hw", str(HW), "--sampler", "tpe", "--trials", "16",
              "--seed", "5", "--deterministic", "--jobs", "2", "--json"]
    runner = CliRunner()
    loky = runner.invoke(app, [*common, "--run-dir", str(tmp_path / "loky")])
    assert loky.exit_code == 0, loky.output
    dask = runner.invoke(app, [*common, "--executor", "dask", "--scheduler", dask_scheduler,
                               "--run-dir", str(tmp_path / "dask")])
    assert dask.exit_code == 0, (dask.output, repr(dask.exception))
    assert _history(tmp_path / "loky") == _history(tmp_path / "dask")
    assert len(_history(tmp_path / "dask")) == 16


def test_dask_flags_are_checked_before_the_run_directory_exists(tmp_path):
    runner = CliRunner()
    for flags, needle in ((["--executor", "ray"], "--executor"), (["--scheduler", "tcp://127.0.0.1:1"], "dask"),
                          (["--executor", "dask", "--scheduler", "nowhere"], "--scheduler")):
        result = runner.invoke(app, ["optimize", "--study", str(STUDY), "--hw", str(HW), *flags,
                                     "--run-dir", str(tmp_path / "x")])
        assert result.exit_code == 2 and needle in result.stderr, result.output
        assert not (tmp_path / "x").exists()
