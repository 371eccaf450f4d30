"""Faults on one machine: a simulator worker process dies, Ctrl-C, damaged run files."""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from typer.testing import CliRunner

from palm_search.commands.cli import app
from palm_search.search.baseline import choose_baseline
from palm_search.search.driver import open_search, optimize, run_baseline
from palm_search.search.evaluate import evaluate
from palm_search.search.study import load_study

DATA = Path(__file__).parent / "data"
STUDY = DATA / "small-study.toml"
HW = DATA / "mini-mesh.toml"
runner = CliRunner()


def dies_on_tp_2(model, hardware, strategy, network, time_limit_s):
    """An evaluator whose worker process dies (as on out-of-memory) for every strategy with TP 2."""
    if strategy.tp == 2:
        os._exit(1)
    return evaluate(model, hardware, strategy, network, time_limit_s)


@pytest.mark.parametrize("deterministic", [True, False])
def test_a_dying_worker_process_fails_its_trials_and_the_search_goes_on(tmp_path, deterministic):
    spec = load_study(STUDY).replace(hardware=str(HW), sampler="random", trials=12)
    search = open_search(spec, run_dir=tmp_path / "run", jobs=2, deterministic=deterministic)
    search.evaluator = dies_on_tp_2
    baseline, _ = choose_baseline(spec, search.model, search.hardware)
    run_baseline(search, baseline)  # in the driver process, not through the evaluator
    optimize(search)
    trials = search.study.trials
    died = [t for t in trials if t.state == TrialState.FAIL]
    assert len(trials) == 12 and all(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in trials)
    assert died and all("worker process died" in t.user_attrs["error"] for t in died)
    assert all(t.user_attrs["strategy"]["tp"] == 2 for t in died)
    assert all(t.user_attrs["strategy"]["tp"] != 2 for t in trials if t.state == TrialState.COMPLETE)


def _optimize_args(run_dir: Path, trials: int = 30) -> list[str]:
    return [sys.executable, "-m", "palm_search", "optimize", "--model", "T-1.7B", "--hw", "wafer",
            "--sampler", "random", "--trials", str(trials), "--seed", "1", "--jobs", "2", "--network", "analytical",
            "--run-dir", str(run_dir), "--json"]


def _study(run_dir: Path) -> optuna.Study:
    from palm_search.search.storage import journal_storage

    storage = journal_storage(run_dir)
    [name] = optuna.get_all_study_names(storage)
    return optuna.load_study(study_name=name, storage=storage)


def _finished(run_dir: Path) -> int:
    if not (run_dir / "study.journal").is_file():
        return 0
    try:
        return sum(t.state.is_finished() for t in _study(run_dir).trials)
    except ValueError:  # no study in the journal yet
        return 0


TRIALS = 60
"""Of the Ctrl-C test: random sampling keeps up to 24 trials in flight, all told before the run ends."""


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_with_exit_code_130_and_the_same_command_resumes(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(_optimize_args(run_dir, TRIALS), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    deadline = time.monotonic() + 60
    while _finished(run_dir) < 3 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert process.poll() is None, "optimize ended before it could be interrupted"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    progress = re.compile(rf"trials \d+/{TRIALS} after \d+ s ")  # the plain progress lines of a non-terminal stderr
    lines = [line for line in stderr.splitlines() if line.strip() and not progress.match(line)]
    assert process.returncode == 130, stderr
    assert len(lines) == 1 and lines[0].startswith("interrupted:"), stderr
    assert (run_dir / "trials.csv").is_file() and (run_dir / "best.json").is_file()
    stopped = _finished(run_dir)
    assert 3 <= stopped < TRIALS
    resumed = subprocess.run(_optimize_args(run_dir, TRIALS), capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    study = _study(run_dir)
    assert len(study.trials) == TRIALS
    assert all(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in study.trials)
    assert sum(t.user_attrs.get("baseline", False) for t in study.trials) == 1


def _one_line_exit_2(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_a_journal_cut_inside_a_record_loses_that_record_only_and_resumes(tmp_path, caplog):
    # As a kill -9 or a full disk leave it: the unterminated last record is dropped (one line on
    # stderr), every trial told before it is kept, and the run completes its trials.
    args = ["optimize", "--study", str(STUDY), "--hw", str(HW), "--trials", "6", "--sampler", "random",
            "--jobs", "1", "--artifacts-top", "0", "--run-dir", str(tmp_path / "r"), "--json"]
    assert runner.invoke(app, args).exit_code == 0
    journal = tmp_path / "r" / "study.journal"
    data = journal.read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 20  # 20 bytes into the record after the middle
    journal.write_bytes(data[:cut])
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    [name] = optuna.get_all_study_names(storage)  # Optuna's reading skips the unterminated record
    told = optuna.load_study(study_name=name, storage=storage).trials
    kept = {t.number: t.values for t in told if t.state == TrialState.COMPLETE}
    assert journal.read_bytes() == data[:cut]
    args[args.index("--trials") + 1] = "10"
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "dropped its unfinished last record" in caplog.text  # a warning through logging: stderr
    trials = _study(tmp_path / "r").trials
    assert sum(t.state.is_finished() for t in trials) == 10
    assert all(trials[n].values == values for n, values in kept.items())


def test_kill_9_of_the_driver_loses_no_told_trial_and_the_same_command_resumes(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(_optimize_args(run_dir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while _finished(run_dir) < 5 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "optimize ended before it could be killed"
    process.kill()
    process.wait(timeout=30)
    told = {t.number: t.values for t in _study(run_dir).trials if t.state == TrialState.COMPLETE}
    assert told
    resumed = subprocess.run(_optimize_args(run_dir), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    trials = _study(run_dir).trials
    assert sum(t.state == TrialState.COMPLETE or bool(t.user_attrs.get("error")) for t in trials) == 30
    assert all(trials[n].values == values for n, values in told.items())
    assert sum(t.user_attrs.get("baseline", False) for t in trials) == 1


def _children(pid: int) -> list[int]:
    """Process ids whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_kill_9_of_a_worker_process_from_outside_fails_its_trials_and_the_search_finishes(tmp_path):
    run_dir = tmp_path / "run"
    args = _optimize_args(run_dir)
    args[args.index("analytical")] = "contention"  # simulations long enough to be killed mid-way
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, workers = time.monotonic() + 60, []
    while process.poll() is None and time.monotonic() < deadline and not workers:
        workers = [p for child in _children(process.pid) for p in [child, *_children(child)]
                   if "loky" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")] if _finished(run_dir) >= 3 \
            else []
        time.sleep(0.05)
    assert workers, "no worker process to kill"
    os.kill(workers[-1], signal.SIGKILL)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-2000:]
    trials = _study(run_dir).trials
    assert sum(t.state == TrialState.COMPLETE or bool(t.user_attrs.get("error")) for t in trials) == 30


def _small_optimize(run_dir: Path, trials: int = 30) -> list[str]:
    return [sys.executable, "-m", "palm_search", "optimize", "--study", str(STUDY), "--hw", str(HW),
            "--sampler", "random", "--trials", str(trials), "--jobs", "1", "--network", "analytical",
            "--run-dir", str(run_dir), "--json"]


def test_a_full_disk_is_one_line_and_the_same_command_resumes_when_there_is_room(tmp_path):
    # The file-size limit stands for a full disk: a write past it fails (EFBIG) as one past the
    # end of the disk does (ENOSPC); Python ignores SIGXFSZ, so the write raises.
    run_dir = tmp_path / "run"

    def small_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))

    full = subprocess.run(_small_optimize(run_dir), capture_output=True, text=True, timeout=300,
                          preexec_fn=small_disk)
    lines = [line for line in full.stderr.splitlines() if line.strip() and not line.startswith("trials ")]
    assert full.returncode == 2 and len(lines) == 1, full.stderr[-2000:]
    assert "File too large" in lines[0] and "resume" in lines[0]
    told = {t.number: t.values for t in _study(run_dir).trials if t.state == TrialState.COMPLETE}
    resumed = subprocess.run(_small_optimize(run_dir), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    trials = _study(run_dir).trials
    assert sum(t.state.is_finished() for t in trials) == 30
    assert all(trials[n].values == values for n, values in told.items())


def _permission_bits_apply() -> list[str] | None:
    """A command prefix under which file permission bits bind: none for a user; for root, a user
    namespace (``unshare --user``: root's capabilities stay outside it, the owner bits apply);
    None if root cannot make one here."""
    if os.geteuid():
        return []
    try:
        made = subprocess.run(["unshare", "--user", "true"], capture_output=True, timeout=30).returncode == 0
    except OSError:
        made = False
    return ["unshare", "--user"] if made else None


def test_a_run_directory_that_cannot_be_written_is_one_line_and_nothing_is_written(tmp_path):
    # A read-only directory where permission bits bind; else (root without user namespaces) a
    # path through a regular file, which the system refuses to create as well (ENOTDIR).
    parent = tmp_path / "read-only"
    prefix = _permission_bits_apply()
    if prefix is None:
        parent.write_text("a file, not a directory")
        expected = "Not a directory"
    else:
        parent.mkdir()
        parent.chmod(0o555)
        expected = "Permission denied"
    done = subprocess.run([*(prefix or []), *_small_optimize(parent / "run", trials=3)], capture_output=True,
                          text=True, timeout=300)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert expected in lines[0] and str(parent / "run") in lines[0]
    assert not (parent / "run").exists() if prefix is None else list(parent.iterdir()) == []


@pytest.mark.parametrize("content", ['{"strategy": {"tp": 2,', "", "[1, 2]", '{"strategy": {"tp": "eight"}}',
                                     '{"strategy": {"tp": 2, "warp": 9}}', "\x00\x01\x02"])
def test_a_corrupt_best_json_is_a_one_line_error(tmp_path, content):
    best = tmp_path / "best.json"
    best.write_text(content)
    line = _one_line_exit_2(runner.invoke(app, ["simulate", "--model", "T-1.7B", "--hw", str(HW),
                                                "--strategy", str(best)]))
    assert "best.json" in line


def test_a_simulation_over_its_budget_fails_its_trial_and_the_search_goes_on(tmp_path):
    # A budget no simulation can meet (1 us): every trial stops at its first check, fails with
    # the reason, and the two workers take the next trials until the study holds all of them.
    spec = load_study(STUDY).replace(hardware=str(HW), sampler="random", trials=8, eval_timeout_s=1e-6,
                                     network="sharing")
    search = open_search(spec, run_dir=tmp_path / "run", jobs=2, deterministic=True)
    optimize(search)
    trials = search.study.trials
    assert len(trials) == 8 and all(t.state == TrialState.FAIL for t in trials)
    assert all("BudgetExceeded: simulation stopped at its wall-clock budget" in t.user_attrs["error"] for t in trials)
    from palm_search.views.outputs import write_outputs  # the summary of a study with no feasible trial

    summary = write_outputs(search, tmp_path / "run")
    assert (summary["trials"], summary["failed"], summary["feasible"], summary["best"]) == (8, 8, 0, None)


def test_outputs_of_a_study_whose_every_trial_failed_have_no_best_and_do_not_crash():
    from palm_search.views.outputs import top_mappings, trials_frame

    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    trial.set_user_attr("error", "RuntimeError: boom")
    study.tell(trial, state=TrialState.FAIL)
    frame = trials_frame(study)
    assert list(frame["state"]) == ["FAIL"] and "samples_per_s" not in frame
    assert "speedup" not in frame and top_mappings(frame, 3).empty  # no failed trial as the best
