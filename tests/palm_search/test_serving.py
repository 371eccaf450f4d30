"""optimize --mode inference: the floor holds, the front is non-dominated, bad serving input is one line."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from palm_search.commands.cli import app

runner = CliRunner()
BASE = ["optimize", "--mode", "inference", "--model", "Llama-3.2-1B", "--hw", "wormhole-n150",
        "--precision", "bfloat8_b", "--users", "1", "--users", "8", "--jobs", "1", "--trials", "6",
        "--artifacts-top", "0", "--network", "analytical"]


def _optimize(tmp_path, *extra: str):
    return runner.invoke(app, [*BASE, "--run-dir", str(tmp_path / "run"), *extra])


def test_the_best_meets_the_floor_and_every_trial_below_it_is_infeasible(tmp_path):
    result = _optimize(tmp_path, "--min-tokens-per-s-per-user", "90", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["mode"] == "inference"
    assert summary["best"]["tokens_per_s_per_user"] >= 90
    best = json.loads((tmp_path / "run" / "best.json").read_text())["result"]
    for key in ("ttft_s", "time_per_output_token_s", "tokens_per_s_per_user", "tokens_per_s", "users"):
        assert best[key] > 0
    assert best["tokens_per_s"] == best["users"] * best["tokens_per_s_per_user"]
    import pandas as pd

    trials = pd.read_csv(tmp_path / "run" / "trials.csv")
    feasible = trials[trials["feasible"] == True]  # noqa: E712
    assert len(feasible) and (feasible["tokens_per_s_per_user"] >= 90).all()


def test_the_front_of_tokens_per_s_against_tokens_per_s_per_user_is_non_dominated(tmp_path):
    result = _optimize(tmp_path, "--objective", "throughput", "--objective", "tokens_per_s_per_user", "--json")
    assert result.exit_code == 0, result.output
    front = json.loads(result.stdout)["pareto_front"]
    assert front
    points = [(p["tokens_per_s"], p["tokens_per_s_per_user"]) for p in front]
    assert len(set(points)) == len(points)
    for a in points:
        assert not any(b != a and b[0] >= a[0] and b[1] >= a[1] for b in points)


def _one_line_error(result, tmp_path, needle: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], result.stderr
    assert not (tmp_path / "run").exists()


def test_a_floor_no_mapping_meets_is_one_line_and_leaves_no_run_directory(tmp_path):
    _one_line_error(_optimize(tmp_path, "--min-tokens-per-s-per-user", "1e6"), tmp_path, "--min-tokens-per-s-per-user")


def test_a_prompt_longer_than_the_context_is_one_line(tmp_path):
    _one_line_error(_optimize(tmp_path, "--prompt-length", "1000000"), tmp_path, "exceeds the context")


def test_users_that_fit_no_memory_are_one_line(tmp_path):
    result = runner.invoke(app, ["optimize", "--mode", "inference", "--model", "Llama-3.2-1B", "--hw", "wormhole-n150",
                                 "--users", "1000000", "--jobs", "1", "--run-dir", str(tmp_path / "run")])
    _one_line_error(result, tmp_path, "fits the memory")


def test_serving_keys_in_training_are_one_line(tmp_path):
    result = runner.invoke(app, ["optimize", "--model", "Llama-3.2-1B", "--hw", "wormhole-n150",
                                 "--min-tokens-per-s-per-user", "5", "--run-dir", str(tmp_path / "run")])
    _one_line_error(result, tmp_path, "mode")


def test_an_inference_search_of_a_model_that_generates_no_tokens_is_one_line(tmp_path):
    # ResNet-50 and BERT have no decode step; their error named a context they do not have
    for model in ("ResNet-50", "BERT-base"):
        result = runner.invoke(app, ["optimize", "--mode", "inference", "--model", model, "--hw", "wormhole-n150",
                                     "--jobs", "1", "--run-dir", str(tmp_path / "run")])
        _one_line_error(result, tmp_path, "generates none")
