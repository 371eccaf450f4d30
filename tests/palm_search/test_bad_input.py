"""Bad input, tried systematically: mutated model, hardware, strategy and study files and random
flag values. Every case must end in a valid result (exit 0) or one line ``error: ...`` with exit
code 2: never a traceback, never a hang (each run is bounded by an alarm), and ``optimize`` on bad
input never leaves a run directory behind. The number of cases tried is printed (``-s``) and
kept in pytest's cache under ``palm_search/bad_input_cases``.
"""

from __future__ import annotations

import signal
import tempfile
from pathlib import Path

import pytest
from fuzzing import BASES, DATA, SWITCHES, mutated, to_toml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from palm_search.commands.cli import app
from simulator import strategy_fields

RUN_SECONDS = 30
runner = CliRunner()
tried = {"cases": 0}


def _mutated(kind: str, data) -> dict:
    return data.draw(mutated(kind))


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang


def _invoke(args: list[str]):
    """Run the CLI in this process, at most RUN_SECONDS; fail on a hang or a traceback."""
    tried["cases"] += 1
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(RUN_SECONDS)
    try:
        result = runner.invoke(app, args)
    except _Hang:
        pytest.fail(f"hang (> {RUN_SECONDS} s): palm-search {' '.join(args)}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if isinstance(result.exception, _Hang):
        pytest.fail(f"hang (> {RUN_SECONDS} s): palm-search {' '.join(args)}")
    assert result.exit_code in (0, 2), (args, repr(result.exception), result.output[-2000:])
    assert "Traceback" not in result.output, (args, result.output[-2000:])
    if result.exit_code == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        if lines and lines[0].startswith("Usage:"):
            # A value the flag's type rejects (e.g. --tp nan) is refused by typer/click before our
            # code runs: its usage box names the flag and the value (several lines, exit code 2).
            tried["usage_errors"] = tried.get("usage_errors", 0) + 1
            assert "Invalid value" in result.stderr or "No such option" in result.stderr or "requires an argument" \
                in result.stderr or "Missing" in result.stderr, (args, result.stderr)
        else:
            assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.stderr)
    return result


SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.slow
@SETTINGS
@given(kind=st.sampled_from(["model", "hardware", "strategy"]), data=st.data())
def test_mutated_model_hardware_and_strategy_files_never_crash_simulate(kind, data):
    with tempfile.TemporaryDirectory() as directory:
        files = {}
        for name in ("model", "hardware", "strategy"):
            document = _mutated(name, data) if name == kind else BASES[name]
            files[name] = Path(directory) / f"{name}.toml"
            files[name].write_text(to_toml(document))
        _invoke(["simulate", "--model", str(files["model"]), "--hw", str(files["hardware"]),
                 "--strategy", str(files["strategy"]), "--network", "analytical", "--json"])


@pytest.mark.slow
@settings(SETTINGS, max_examples=25)
@given(data=st.data())
def test_mutated_study_files_never_crash_optimize_nor_leave_a_run_directory(data):
    with tempfile.TemporaryDirectory() as directory:
        study = Path(directory) / "study.toml"
        study.write_text(to_toml(_mutated("study", data)))
        run_dir = Path(directory) / "run"
        result = _invoke(["optimize", "--study", str(study), "--jobs", "1", "--network", "analytical",
                          "--run-dir", str(run_dir), "--json"])
        assert result.exit_code == 0 or not run_dir.exists()


FLAG_VALUES = st.one_of(st.sampled_from(["-1", "0", "1", "2", "nan", "inf", "1e308", "99999999999999999999",
                                         "", "x", "1f1b", "gpipe", "full", "line", "0,1;2,3", "3,3", "-"]),
                        st.text(max_size=8))


@pytest.mark.slow
@SETTINGS
@given(flags=st.dictionaries(st.sampled_from([*strategy_fields(), "network"]),
                             FLAG_VALUES, min_size=1, max_size=4))
def test_random_simulate_flags_never_crash(flags):
    args = ["simulate", "--model", "T-1.7B", "--hw", str(DATA / "mini-mesh.toml"), "--json"]
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        args += [flag] if name in SWITCHES else [flag, value]
    _invoke(args)


@pytest.mark.slow
@settings(SETTINGS, max_examples=30)
@given(flags=st.dictionaries(st.sampled_from(["trials", "sampler", "seed", "objective", "network", "top", "jobs",
                                              "executor", "storage"]), FLAG_VALUES, min_size=1, max_size=3))
def test_random_optimize_flags_never_crash_nor_leave_a_run_directory(flags):
    with tempfile.TemporaryDirectory() as directory:
        run_dir = Path(directory) / "run"
        args = ["optimize", "--study", str(DATA / "small-study.toml"), "--hw", str(DATA / "mini-mesh.toml"),
                "--run-dir", str(run_dir), "--json"]
        flags.setdefault("trials", "3")
        flags.setdefault("jobs", "1")
        for name, value in flags.items():
            args += ["--" + name, value]
        result = _invoke(args)
        assert result.exit_code == 0 or not run_dir.exists(), (args, result.stderr)


@pytest.fixture(scope="module", autouse=True)
def _report_the_number_of_cases(request):
    """After the module: print (``-s``) and, with pytest's cache, keep how many cases were tried."""
    yield
    cache = getattr(request.config, "cache", None)
    if cache is not None:
        cache.set("palm_search/bad_input_cases", tried["cases"])
    print(f"\nbad-input cases tried: {tried['cases']} ({tried.get('usage_errors', 0)} refused by the flag "
          "parser; none crashed, hung or left a run directory)")
