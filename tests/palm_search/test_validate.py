"""`palm-search validate` against published measurements.

Issue targets are asserted at the issue's tolerance: Narayanan SC'21 Table 1 mean absolute
error <= 5% and every row within 10%, PALM Table V ResNet-50 within 15%. PALM Table IV has no
target; it is held near what the model gives (2.8% mean, 6.9% max), under the authors' released
code's 8.0% mean error, as a regression guard.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from palm_search.cli import app
from palm_search.validate import run_suites, summary

runner = CliRunner()


@pytest.mark.slow
def test_narayanan_table1_within_issue_targets():
    rows = run_suites(["narayanan-table1"], jobs=2)
    stats = summary(rows)["narayanan-table1"]
    assert len(rows) == 10 and all(r.predicted > 0 for r in rows)
    assert stats["mean_abs_error"] <= 0.05
    assert stats["max_abs_error"] <= 0.10


@pytest.mark.slow
def test_narayanan_table2_ptd_rows_within_the_table1_targets():
    # the same source and hardware at 1, 2 and 4 times the GPUs (data parallelism varies)
    stats = summary(run_suites(["narayanan-table2"], jobs=2))["narayanan-table2"]
    assert stats["rows"] == 6
    assert stats["mean_abs_error"] <= 0.05
    assert stats["max_abs_error"] <= 0.10


@pytest.mark.slow
def test_korthikanti_table5_out_of_sample():
    # a check of the a100-cluster calibration on data it was not built from (no issue target):
    # held near what the model gives (3.8% mean, 9.3% max) so that a change making it worse fails
    stats = summary(run_suites(["korthikanti-table5"], jobs=2))["korthikanti-table5"]
    assert stats["rows"] == 8
    assert stats["mean_abs_error"] <= 0.05
    assert stats["max_abs_error"] <= 0.10


def test_korthikanti_table4_layer_times():
    # one 22B layer, forward and backward, five settings: held near 3.9% mean, 6.1% max
    rows = run_suites(["korthikanti-table4"], jobs=2)
    stats = summary(rows)["korthikanti-table4"]
    assert stats["rows"] == 10
    assert stats["mean_abs_error"] <= 0.05
    assert stats["max_abs_error"] <= 0.08
    by_case = {r.case: r.predicted for r in rows}
    # recompute only adds to the backward; sequence parallelism shortens the forward
    assert by_case["baseline with recompute, forward"] == pytest.approx(by_case["baseline no recompute, forward"])
    assert by_case["sequence parallelism, forward"] < by_case["baseline no recompute, forward"]


@pytest.mark.slow
def test_palm_table4_regression_guard():
    stats = summary(run_suites(["palm-table4"], jobs=2))["palm-table4"]
    assert stats["mean_abs_error"] <= 0.05  # the authors' released code: 8.0% (REFERENCE.md)
    assert stats["max_abs_error"] <= 0.08


def test_palm_table5_resnet50_on_grayskull_within_15_percent():
    rows = {r.case: r for r in run_suites(["palm-table5"], jobs=2)}
    assert abs(rows["ResNet-50"].error) <= 0.15
    assert rows["BERT-base"].predicted > 0


def test_cross_checks_do_not_count_as_error():
    rows = run_suites(["palm-table7"], jobs=2)
    assert all(not r.measured for r in rows)
    assert summary(rows)["palm-table7"]["mean_abs_error"] is None


def test_cli_json_and_csv():
    result = runner.invoke(app, ["validate", "--suite", "palm-table7", "--json", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {r["case"] for r in doc["rows"]} == {"T-18B", "T-76B", "T-145B"}
    csv = runner.invoke(app, ["validate", "--suite", "palm-table7", "--csv", "--jobs", "1"])
    assert csv.exit_code == 0 and csv.stdout.splitlines()[0].startswith("suite,case,unit")


def test_unknown_suite_is_exit_code_2():
    result = runner.invoke(app, ["validate", "--suite", "nope"])
    assert result.exit_code == 2 and "unknown suite" in result.stderr
