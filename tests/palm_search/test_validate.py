"""`palm-search validate` against published measurements.

Issue targets are asserted at the issue's tolerance: Narayanan SC'21 Table 1 mean absolute
error <= 5% and every row within 10%, PALM Table V ResNet-50 within 15%. PALM Table IV has no
target; it is held near what the model gives (2.8% mean, 6.9% max), under the authors' released
code's 8.0% mean error, as a regression guard.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from palm_search.commands.cli import app
from palm_search.commands.validate import DATA_DIR, run_suites, summary

runner = CliRunner()
REPOSITORY_DATA = Path(__file__).resolve().parents[2] / "studies" / "validation"


# suite, rows, largest mean and largest single absolute error allowed: the targets for
# Narayanan Table 1 (and its Table 2, same source and hardware); elsewhere held near what the
# model gives (Korthikanti Table 5: 3.8% / 9.3%, Table 4: 3.9% / 6.1%, both on data the
# calibration was not built from; PALM Table IV: 2.8% / 6.9%, the authors' code 8.0% mean) so
# that a change making them worse fails
# Megatron-Bridge on DGX H100 (FP8, today's recipes, current scaling as printed): held near what
# the model gives, 6.1% mean and 16.3% max (a 2024 NeMo 24.07 row, slower software than the
# 2025-26 releases' 1-6%), on an H100 calibration from microbenchmarks only
GUARDS = [("narayanan-table1", 10, 0.05, 0.10), ("narayanan-table2", 6, 0.05, 0.10),
          ("korthikanti-table5", 8, 0.05, 0.10), ("korthikanti-table4", 10, 0.05, 0.08),
          ("palm-table4", 6, 0.05, 0.08), ("megatron-bridge-h100", 7, 0.065, 0.17)]


@pytest.mark.slow
@pytest.mark.parametrize("suite, rows, mean, worst", GUARDS, ids=[g[0] for g in GUARDS])
def test_suite_errors_within_their_tolerance(suite, rows, mean, worst):
    results = run_suites([suite], jobs=2)
    stats = summary(results)[suite]
    assert stats["rows"] == rows and all(r.predicted > 0 for r in results)
    assert stats["mean_abs_error"] <= mean
    assert stats["max_abs_error"] <= worst


# megatron-bridge-h100-moe (Megatron-Bridge 25.11-26.04.01, the DGX-H100 MoE rows): the issue's
# target (mean <= 15%, no row above 30%) is not met: a simulated MoE layer runs 2-3.4x faster
# than the published ones wherever its all-to-all stays on NVLink or the recipe overlaps it
# (the suite's SOURCE.md); held near what the model gives, 60.8% mean and 100% max over the 7
# counted rows (GPT-OSS 25.11 and Qwen3-30B-A3B 25.11 do not fit as printed: -100% each), as a
# regression guard. Qwen3-235B-A22B (expert TP 1 under TP 2, EP 32 spanning TP ranks, the
# all-to-all overlapped as its recipe does) lands 29% and 38% fast on its two counted rows.
MOE_COUNTED = {"GPT-OSS-120B bf16 64 GPUs 26.04.01", "Qwen3-30B-A3B fp8 16 GPUs 26.04.01",
               "Qwen3-30B-A3B fp8 16 GPUs 26.02.01", "GPT-OSS-120B bf16 64 GPUs 25.11",
               "Qwen3-30B-A3B fp8 16 GPUs 25.11", "Qwen3-235B-A22B fp8 256 GPUs 26.04.01",
               "Qwen3-235B-A22B fp8 256 GPUs 25.11"}


@pytest.mark.slow
def test_megatron_bridge_moe_counts_each_configuration_once_within_its_guard():
    rows = run_suites(["megatron-bridge-h100-moe"], jobs=2)
    assert {r.case for r in rows if r.measured} == MOE_COUNTED
    reported = [r for r in rows if r.excluded_as == "reported"]
    assert len(reported) == 8 and all(r.predicted > 0 and not r.measured for r in reported)
    assert all(abs(r.error) <= 0.39 for r in rows if r.case.startswith("Qwen3-235B-A22B") and r.measured)
    stats = summary(rows)["megatron-bridge-h100-moe"]
    assert stats["rows"] == 15 and stats["mean_abs_error"] <= 0.61 and stats["max_abs_error"] <= 1.0


def test_validation_data_is_read_from_the_running_checkout():
    # not from the checkout an editable install was made from
    assert DATA_DIR == REPOSITORY_DATA


def test_korthikanti_layer_times_follow_the_settings():
    by_case = {r.case: r.predicted for r in run_suites(["korthikanti-table4"], jobs=2)}
    # recompute only adds to the backward; sequence parallelism shortens the forward
    assert by_case["baseline with recompute, forward"] == pytest.approx(by_case["baseline no recompute, forward"])
    assert by_case["sequence parallelism, forward"] < by_case["baseline no recompute, forward"]


def test_palm_table5_resnet50_on_grayskull_within_15_percent():
    # the repository's data (the installed package's may be an older checkout's)
    rows = {r.case: r for r in run_suites(["palm-table5"], data_dir=REPOSITORY_DATA, jobs=2)}
    assert abs(rows["ResNet-50"].error) <= 0.15
    assert rows["BERT-base-SST-2"].predicted > 0 and "b=128" in rows["BERT-base-SST-2"].chosen


# tt-metal's published ResNet-50 (README "CNNs": n150 batch 16 4,700 fps, e150 batch 20 5,100 fps,
# bfloat8_b LoFi) under the tt-metal convolution model, both predicted above the silicon: the n150
# under the mapping tt-metal runs (every convolution over the 8 x 8 grid, the batch in one call:
# tp 64, microbatch 16) at +8.2% (+183% under the fastest expressible mapping, a pipeline of
# data-parallel replicas that tt-metal does not run); the e150 at +38% (Grayskull's 120 cores
# admit no whole-grid split of ResNet-50's channels, so the fastest expressible mapping stands in;
# see the suite's SOURCE.md). Unseen by any calibration; held near what the model gives.
CNN_GUARDS = [("n150", 0.10), ("e150", 0.40)]


@pytest.fixture(scope="module")
def cnn_rows():
    return run_suites(["tenstorrent-cnn"], data_dir=REPOSITORY_DATA, jobs=2)


@pytest.mark.parametrize("group, worst", CNN_GUARDS, ids=[g[0] for g in CNN_GUARDS])
def test_tenstorrent_cnn_rows_within_their_guard(group, worst, cnn_rows):
    stats = summary(cnn_rows)["tenstorrent-cnn"]
    assert stats["rows"] == 2 and all(r.error > 0 for r in cnn_rows)
    assert stats["groups"][group]["max_abs_error"] <= worst


# The tenstorrent-gemm targets of the tiled-dataflow issue (n150 BF16 DRAM rows: mean <= 10%, max
# <= 25%): the max is met, the mean not yet. With the unpackers' L1 read rate, the op-to-op latency
# per operation, the K loop of tt-metal's reader kernels (simulator.workload.gemm_pipeline: fill,
# each K-block's DRAM read + multicast + handshake, drain at each core's share of the chip's DRAM)
# and each row's blocking as tt-metal's benchmark set it (in0_block_w_div, num_out_blocks_h/w; the
# subblock of one output block) those rows are at 11.8% mean and 24.2% max (from 23.0% / 37.0%
# before the K loop). Most rows are still faster than silicon: the measured times are host times
# of traced runs, up to 31% over the device time the report's utilisation implies, against which
# the model is within 10% on 193 of 234 rows. Held near what the model gives.
GEMM_GUARDS = [("n150 8x8 DRAM", 0.13, 0.25), ("p150 13x10 DRAM", 0.10, 0.30), ("p150 11x10 DRAM", 0.08, 0.23),
               ("n150 8x8 L1", 0.15, 0.27), ("p150 13x10 L1", 0.09, 0.28), ("p150 11x10 L1", 0.10, 0.30)]


@pytest.fixture(scope="module")
def gemm_rows():
    return run_suites(["tenstorrent-gemm"], jobs=1)


@pytest.mark.parametrize("group, mean, worst", GEMM_GUARDS, ids=[g[0] for g in GEMM_GUARDS])
def test_tenstorrent_gemm_groups_within_their_guard(group, mean, worst, gemm_rows):
    stats = summary(gemm_rows)["tenstorrent-gemm"]
    assert stats["rows"] == 234
    assert stats["groups"][group]["mean_abs_error"] <= mean
    assert stats["groups"][group]["max_abs_error"] <= worst


def test_tenstorrent_gemm_n150_bf16_dram_rows_within_their_guard(gemm_rows):
    errors = [abs(r.error) for r in gemm_rows if r.case.startswith("n150") and " BFLOAT16 " in r.case
              and r.case.endswith("DRAM/DRAM/DRAM")]
    assert len(errors) == 12
    assert sum(errors) / len(errors) <= 0.12 and max(errors) <= 0.25


def test_cross_checks_do_not_count_as_error():
    rows = run_suites(["palm-table7"], jobs=2)
    assert all(not r.measured for r in rows)
    assert summary(rows)["palm-table7"]["mean_abs_error"] is None


def test_the_wafer_cross_check_runs_under_both_dataflows_and_tiling_moves_fewer_bytes():
    rows = run_suites(["palm-table7", "palm-table7-tiled"], jobs=2)
    by = {(r.suite, r.case): r.predicted for r in rows}
    for model in ("T-18B", "T-76B", "T-145B"):
        assert by[("palm-table7-tiled", model)] > by[("palm-table7", model)] > 0


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


# tenstorrent-llm (tt-metal's LLM table): the LLM-inference issue's targets (decode tokens/s per
# user within 10% mean, 25% max; time to first token 20% mean) are not met. Under the demo's own
# formats, fidelities, host sampling of batch 32, decode attention in chunks of 256 keys and the
# 10 data-movement operations of each decode layer (stack tt-transformers-performance), every
# kernel launch a 2.05 us gap in which DRAM streams nothing and every GEMM its K loop on its
# chip's cores (each block's weights read at one core's DRAM rate, the input multicast block by
# block; a decode step's DRAM-sharded on one reader core per DRAM port), the 70B on the 8-chip
# QuietBox is within 5% in decode (-4.2%; time to first token -6.9%), while every one-card row is
# predicted faster than the silicon: decode 36.0% mean, 77.4% max (the 1B; the n150's 8B +28.2%,
# the p150 +34.7%). A prefill's GEMMs run whole on the stack's 8 x 8 grid,
# operands in DRAM, as tt-metal's matmul 2D does: time to first token 19.5% mean (the 20%
# target met), 30.1% max. What the model lacks there is the kernel time of
# tt-metal's small operations (3-16 us each on Galaxy; no n150 per-op figures are published) and
# a prefill that runs at ~20 TFLOP/s; see the suite's SOURCE.md. Since DRAM reads take the read
# data's route, a decode step streams DRAM at the 240-260 GB/s tt-metal measures
# (tests/simulator/test_decode.py). Held near what the model gives as a regression guard.
LLM_GUARDS = [("decode", 0.37, 0.78), ("prefill", 0.19, 0.29)]


@pytest.fixture(scope="module")
def llm_rows():
    return run_suites(["tenstorrent-llm"], jobs=2)


@pytest.mark.parametrize("group, mean, worst", LLM_GUARDS, ids=[g[0] for g in LLM_GUARDS])
def test_tenstorrent_llm_groups_within_their_guard(group, mean, worst, llm_rows):
    results = llm_rows
    stats = summary(results)["tenstorrent-llm"]
    assert stats["rows"] == 10 and all(r.predicted > 0 for r in results)
    assert stats["groups"][group]["mean_abs_error"] <= mean
    assert stats["groups"][group]["max_abs_error"] <= worst


# Narayanan SC'21 Table 2's ZeRO-3 rows under the DeepSpeed 2021 stack (simulator/stacks/presets/
# deepspeed-0.3-zero3.toml: per-parameter gathers, each synchronised, 0.4 ms a call and 12.8 us
# more per rank (a Python view and a copy_), gradients all-reduced). The target (mean <=
# 20%) is not met: 38.8% mean, 72.9% max, every row above the measurement (under Megatron-Core:
# 178% / 353%); held there. The throughput falls with the GPU count at a fixed batch, as
# measured, but less: the largest run keeps 36% / 46% of the smallest's TFLOP/s per GPU (measured
# 31% / 35%; Megatron-Core 95% / 99%).
def test_table2_zero3_rows_under_the_deepspeed_2021_stack():
    rows = run_suites(["narayanan-table2-zero3"], data_dir=REPOSITORY_DATA, jobs=1)
    stats = summary(rows)["narayanan-table2-zero3"]
    assert stats["rows"] == 6 and stats["mean_abs_error"] <= 0.39 and stats["max_abs_error"] <= 0.73
    assert all(r.error > 0 for r in rows)
    for model in ("GPT-174.6B", "GPT-529.6B"):
        predicted = [r.predicted for r in rows if r.case.startswith(model)]
        assert predicted == sorted(predicted, reverse=True) and len(set(predicted)) == 3
        assert predicted[-1] / predicted[0] < 0.47


# torchtitan's Llama 3.1 H100 rows under the torchtitan stacks (compiled, eager) on its 500 W hosts:
# target <= 10% mean, no row above 20%, not met; held at what the model gives (30.9% mean, 93.1% max,
# by model 37.2% / 20.8% / 27.8%), every row over-predicted; the 70B and 405B rows at 8k tokens within
# 15%; the eager stack sets the compile column apart; the float8 rowwise rows the worst (SOURCE.md).
def test_torchtitan_h100_rows_under_the_torchtitan_stacks():
    rows = run_suites(["torchtitan-h100"], data_dir=REPOSITORY_DATA, jobs=1)
    stats = summary(rows)["torchtitan-h100"]
    assert stats["rows"] == 30 and stats["mean_abs_error"] <= 0.31 and stats["max_abs_error"] <= 0.94
    assert all(0.0 < r.error < 0.94 for r in rows)
    short = [r for r in rows if r.group != "llama3.1-8b" and "seq 8192 " in r.case + " " and "rowwise" not in r.case]
    assert len(short) == 8 and all(r.error < 0.15 for r in short)
    by_case = {r.case: r for r in rows}
    eager, compiled = (by_case["202412 T3 llama3.1-8b 128 GPUs seq 8192" + tail] for tail in ("", " compile"))
    assert eager.note == "stack torchtitan-fsdp2-eager" and compiled.note == "stack torchtitan-fsdp2"
    assert 1.1 < compiled.predicted / eager.predicted < 1.3  # measured 6,514 / 5,605 = 1.16


# TensorRT-LLM's LLaMA 70B FP8 TP2 static batch under the tensorrt-llm-fp8 stack, one row per release.
# v0.9.0 (1,011 out tok/s/GPU, XQA on: TRTLLM_ENABLE_XQA=1 in the file's own commands) is within 20%.
# v0.6.1 (547) is over-predicted, within a sourced bracket: the simulator is never slower than the
# release (it models no overhead v0.6.1 lacks), and its GQA attention reads each KV head once, as the
# XQA kernel added in v0.8 does, which its authors report gave up to 2.4x Llama-70B throughput
# (docs/source/blogs/XQA-kernel.md); the suite's SOURCE.md.
def test_trtllm_h100_rows_are_within_20_percent_with_xqa_and_within_its_speedup_before_it():
    rows = {row.group: row for row in run_suites(["trtllm-h100"], data_dir=REPOSITORY_DATA, jobs=1)}
    assert rows["v0.9.0"].published == 1011 and abs(rows["v0.9.0"].error) <= 0.20
    assert rows["v0.6.1"].published == 547 and 1.0 < rows["v0.6.1"].predicted / rows["v0.6.1"].published < 2.4


def test_a_decode_steps_time_is_affine_in_its_context_so_the_mean_context_is_the_mean_step():
    from simulator import Strategy, load_hardware, load_model, load_stack, simulate
    model, hardware, stack = load_model("LLaMA2-70B"), load_hardware("h100-cluster"), load_stack("tensorrt-llm-fp8")
    steps = [simulate(model, hardware, Strategy(tp=2, microbatch_size=64, global_batch_size=64, mode="inference",
                                                precision="fp8", prompt_length=2048, decode_context_length=c),
                      stack=stack).iteration_time_s for c in (2049, 3072, 4095)]
    assert steps[1] == pytest.approx((steps[0] + steps[2]) / 2, rel=1e-6)
    without = simulate(model, hardware, Strategy(tp=2, microbatch_size=64, global_batch_size=64, mode="inference",
                                                 precision="fp8", prompt_length=2048, decode_context_length=3072))
    assert not without.feasible and "94.24 GiB" in without.reason
