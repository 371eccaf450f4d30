"""Math fidelity as a throughput factor: the matrix engine's passes divide the peak (tt-metal
``tech_reports/matrix_engine``), on hardware that lists fidelities only."""

from __future__ import annotations

import dataclasses

import pytest

from simulator import InputError, Strategy, load_hardware, load_model, simulate
from simulator.workload.roofline import peak_flop_per_s

N150 = load_hardware("wormhole-n150")
UNFED = dataclasses.replace(N150, compute=dataclasses.replace(N150.compute, unpacker=None))
PASSES = {"LoFi": 1, "HiFi2": 2, "HiFi4": 4}


@pytest.mark.parametrize(("fidelity", "passes"), [(None, 1), ("LoFi", 1), ("HiFi2", 2), ("HiFi3", 3), ("HiFi4", 4)])
def test_the_peak_is_the_stated_one_over_the_passes(fidelity, passes):
    strategy = Strategy(precision="bf16", math_fidelity=fidelity)
    assert peak_flop_per_s(UNFED, strategy) == UNFED.compute.peak_flop_per_s["bf16"] / passes


@pytest.mark.parametrize(("fidelity", "passes"), [("LoFi", 1), ("HiFi2", 2), ("HiFi3", 3), ("HiFi4", 4)])
def test_the_unpackers_cap_the_rate_of_few_passes_only(fidelity, passes):
    # bf16 on Wormhole: 1.125 tiles of 2048 B unpacked per product at 64 B/ns after 2 ns of
    # setup, 38.25 ns, against 16 ns per pass
    fed = peak_flop_per_s(N150, Strategy(precision="bf16", math_fidelity=fidelity))
    assert fed == pytest.approx(2 * 32**3 / max(16e-9 * passes, 1.125 * (2e-9 + 2048 / 64e9)))


def test_more_passes_are_never_faster_and_bound_the_model_flops_utilisation():
    # a compute-bound case: T-1.7B data parallel on a GPU cluster given a fidelity table
    a100 = load_hardware("a100-cluster")
    hardware = dataclasses.replace(a100, compute=dataclasses.replace(a100.compute, math_fidelity_phases=PASSES))
    strategy = Strategy(tp=1, pp=1, dp=8, global_batch_size=64)
    results = [simulate(load_model("T-1.7B"), hardware, dataclasses.replace(strategy, math_fidelity=f))
               for f in PASSES]
    times = [r.iteration_time_s for r in results]
    assert all(r.feasible for r in results) and times == sorted(times) and times[0] < times[-1]
    for result, passes in zip(results, PASSES.values(), strict=True):
        assert result.model_flops_utilisation <= hardware.calibration.gemm_efficiency / passes


def test_the_presets_offer_the_four_fidelities_of_the_matrix_engine():
    for name in ("wormhole-n150", "blackhole-p150"):
        assert load_hardware(name).compute.math_fidelity_phases == {"LoFi": 1, "HiFi2": 2, "HiFi3": 3, "HiFi4": 4}


def test_a_fidelity_on_hardware_without_one_is_an_input_error():
    with pytest.raises(InputError, match="math_fidelity 'HiFi2' is not offered by hardware 'a100-cluster'"):
        simulate(load_model("T-1.7B"), load_hardware("a100-cluster"),
                 Strategy(tp=1, pp=1, dp=8, global_batch_size=64, math_fidelity="HiFi2"))


def test_an_unknown_fidelity_is_an_input_error():
    with pytest.raises(InputError, match="math_fidelity"):
        Strategy(math_fidelity="HiFi9")
