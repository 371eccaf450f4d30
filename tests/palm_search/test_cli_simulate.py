"""`palm-search simulate` through typer's CliRunner."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from palm_search.commands.cli import app

runner = CliRunner()
SMALL = ["simulate", "--model", "T-1.7B", "--hw", "a100-cluster", "--tp", "1", "--pp", "2", "--dp", "4",
         "--global-batch-size", "32"]


def test_simulate_json_is_one_document():
    result = runner.invoke(app, [*SMALL, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["feasible"] is True
    assert doc["samples_per_s"] > 0
    assert doc["strategy"]["pp"] == 2


def test_simulate_prints_a_summary():
    result = runner.invoke(app, SMALL)
    assert result.exit_code == 0, result.output
    assert "samples/s" in result.stdout


@pytest.mark.parametrize(("flags", "needle"), [
    (["--model", "no-such-model", "--hw", "wafer"], "no-such-model"),
    (["--model", "T-18B", "--hw", "nowhere"], "nowhere"),
    (["--model", "T-18B", "--hw", "wafer", "--tp", "7"], "tp"),
    (["--model", "T-18B", "--hw", "wafer", "--schedule", "zigzag"], "schedule"),
    (["--model", "T-18B", "--hw", "wafer", "--tp", "8", "--pp", "40", "--dp", "2"], "devices"),
])
def test_bad_input_is_one_line_and_exit_code_2(flags, needle):
    result = runner.invoke(app, ["simulate", *flags])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0]


def test_bad_strategy_file_names_the_file(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("[strategy]\ntp = 8\nbogus = 1\n")
    result = runner.invoke(app, ["simulate", "--model", "T-18B", "--hw", "wafer", "--strategy", str(path)])
    assert result.exit_code == 2
    assert "s.toml" in result.stderr and "bogus" in result.stderr


def test_simulate_runs_without_the_search_libraries(tmp_path):
    # `palm-search simulate` needs neither optuna nor pandas (issue: 0.74 s of 0.91 s went to them),
    # with flags or replaying a best.json that carries its model and machine, nor rich for JSON
    import subprocess
    import sys

    from simulator import Strategy, hardware_tables, load_hardware

    best = tmp_path / "best.json"
    best.write_text(json.dumps({"model": "T-1.7B", "hardware": "a100-cluster",
                                "machine": hardware_tables(load_hardware("a100-cluster")),
                                "strategy": Strategy(tp=1, pp=2, dp=4, global_batch_size=32).to_dict()}))

    code = ("import sys\n"
            "from typer.testing import CliRunner\n"
            "from palm_search.commands.cli import app\n"
            "result = CliRunner().invoke(app, sys.argv[1:])\n"
            "assert result.exit_code == 0, result.output\n"
            "print(sorted({'optuna', 'pandas', 'rich'} & set(sys.modules)))")
    for flags, printer in ((SMALL[1:], ["rich"]), (["--strategy", str(best)], ["rich"]), ([*SMALL[1:], "--json"], [])):
        loaded = subprocess.run([sys.executable, "-c", code, "simulate", *flags], capture_output=True, text=True,
                                check=True).stdout
        assert loaded.strip().splitlines()[-1] == str(printer), flags  # rich only to print a table


def test_version_is_the_installed_distributions():
    from importlib.metadata import version

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"palm-search {version('palm-search')}"


def test_the_command_line_starts_without_the_simulation_engine():
    """``palm-search --version`` and ``--help`` import the command line only: neither numpy, SimPy
    and the engine (``simulator.api`` loads on first use) nor the search's libraries."""
    import subprocess
    import sys

    code = ("import sys\nfrom palm_search.commands.cli import main\n"
            "print(sorted({'numpy', 'simpy', 'simulator.api', 'simulator.engine', 'optuna', 'pandas', 'rich'}"
            " & set(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_simulate_says_how_many_of_the_machines_devices_it_leaves_idle():
    result = runner.invoke(app, ["simulate", "--model", "T-1.7B", "--hw", "wormhole-n150", "--tp", "4", "--pp", "4",
                                 "--precision", "bf16", "--global-batch-size", "16"])
    assert result.exit_code == 0, result.output
    assert "uses 16 of the machine's 64 devices (48 idle" in result.output


def test_simulate_takes_a_hugging_face_config_and_expert_parallelism():
    from pathlib import Path

    config = Path(__file__).parents[1] / "simulator" / "workload" / "hf_configs" / "Mixtral-8x7B.json"
    result = runner.invoke(app, ["simulate", "--model", str(config), "--hw", "h100-cluster", "--tp", "2",
                                 "--dp", "8", "--ep", "8", "--zero-stage", "1", "--global-batch-size", "8",
                                 "--mode", "inference", "--prompt-length", "512", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["feasible"] is True and doc["strategy"]["ep"] == 8 and doc["traffic_bytes"]["ep"] > 0
    bad = runner.invoke(app, ["simulate", "--model", str(config), "--hw", "h100-cluster", "--dp", "2", "--ep", "4"])
    assert bad.exit_code == 2 and "`ep` must divide dp * cp" in bad.output


def test_simulate_runs_under_a_named_stack_and_rejects_an_unknown_one():
    zero3 = [*SMALL, "--zero-stage", "3", "--json"]
    default, deepspeed = (runner.invoke(app, [*zero3, *flags]) for flags in ([], ["--stack", "deepspeed-0.3-zero3"]))
    assert default.exit_code == deepspeed.exit_code == 0, default.output + deepspeed.output
    megatron = runner.invoke(app, [*zero3, "--stack", "megatron-core"])
    rate = {name: json.loads(r.stdout)["samples_per_s"] for name, r in
            (("default", default), ("deepspeed", deepspeed), ("megatron", megatron))}
    assert rate["megatron"] == rate["default"] > rate["deepspeed"]
    bad = runner.invoke(app, [*zero3, "--stack", "deepspeed"])
    assert bad.exit_code == 2 and "unknown preset 'deepspeed'" in bad.output
    assert len(bad.output.strip().splitlines()) == 1
