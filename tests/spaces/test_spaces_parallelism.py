"""Degrees, microbatch sizes and schedules: every enumerated point is a valid Strategy."""

from __future__ import annotations

import itertools

import pytest

import simulator
from simulator.legality import check_plan, divisors
from spaces import parallelism
from spaces.parallelism import ParallelDegrees, ScheduleChoice

CASES = [("T-145B", "wafer"), ("T-18B", "wafer"), ("LLaMA2-7B", "grayskull"), ("ResNet-50", "grayskull"),
         ("GPT3-175B", "a100-cluster")]


def _legal(model, hardware, d: ParallelDegrees) -> bool:
    """The simulator accepts the degrees with some microbatch size."""
    strategy = simulator.Strategy(tp=d.tp, pp=d.pp, dp=d.dp)
    try:
        check_plan(model, hardware, strategy)
    except simulator.InputError:
        return False
    return True


@pytest.mark.parametrize(("model_name", "hardware_name"), CASES)
def test_enumerated_degrees_are_legal_complete_and_sorted(model_name, hardware_name):
    model, hardware = simulator.load_model(model_name), simulator.load_hardware(hardware_name)
    found = parallelism.enumerate_degrees(model, hardware)
    n = hardware.num_devices
    expected = [ParallelDegrees(tp, pp, n // (tp * pp)) for tp, pp in itertools.product(divisors(n), divisors(n))
                if n % (tp * pp) == 0]
    assert found == sorted(d for d in expected if _legal(model, hardware, d))
    assert found, "some legal degrees exist for every preset pair"
    for d in found:
        strategy = simulator.Strategy(tp=d.tp, pp=d.pp, dp=d.dp)
        assert strategy.num_devices == n
        if model.is_transformer:
            assert model.num_heads % d.tp == 0 and model.hidden_size % d.tp == 0


def test_paper_mapping_is_among_wafer_degrees():
    found = parallelism.enumerate_degrees(simulator.load_model("T-145B"), simulator.load_hardware("wafer"))
    assert ParallelDegrees(8, 20, 2) in found


def test_devices_and_max_tp_restrict_degrees():
    model, hardware = simulator.load_model("T-18B"), simulator.load_hardware("wafer")
    found = parallelism.enumerate_degrees(model, hardware, devices=64, max_tp=4)
    assert found and all(d.tp * d.pp * d.dp == 64 and d.tp <= 4 for d in found)
    with pytest.raises(simulator.InputError, match="devices"):
        parallelism.enumerate_degrees(model, hardware, devices=321)


def test_resnet_tp_divides_its_narrowest_channels():
    found = parallelism.enumerate_degrees(simulator.load_model("ResNet-50"), simulator.load_hardware("grayskull"))
    assert all(64 % d.tp == 0 and d.pp <= 18 for d in found)


def test_microbatch_sizes_divide_the_replica_batch():
    model = simulator.load_model("T-145B")  # B = 2304
    sizes = parallelism.enumerate_microbatch_sizes(model, ParallelDegrees(8, 20, 2))
    assert sizes == divisors(1152)
    capped = parallelism.enumerate_microbatch_sizes(model, ParallelDegrees(8, 20, 2), choices=[1, 2, 4, 5, 128])
    assert capped == [1, 2, 4, 128]
    assert parallelism.enumerate_microbatch_sizes(model, ParallelDegrees(1, 1, 5)) == []


def test_interleaved_schedule_rules():
    model = simulator.load_model("T-145B")  # 80 layers, B = 2304
    labels = [c.label for c in parallelism.enumerate_schedules(model, ParallelDegrees(8, 20, 2), 1)]
    assert labels == ["gpipe", "1f1b", "zb-h1"]  # m = 1152 is not a multiple of pp = 20
    # With B = 2304 = 2^8 * 9 no pp of the 320-core wafer (a multiple of 5) divides m: override B.
    labels = [c.label for c in parallelism.enumerate_schedules(model, ParallelDegrees(8, 40, 1), 1,
                                                                global_batch_size=2560)]
    assert labels == ["gpipe", "1f1b", "interleaved-1f1b:2", "zb-h1"]  # 80 % (40*4) != 0
    labels = [c.label for c in parallelism.enumerate_schedules(model, ParallelDegrees(8, 4, 10), 1,
                                                                global_batch_size=2320)]
    assert labels == ["gpipe", "1f1b", "interleaved-1f1b:2", "interleaved-1f1b:4", "zb-h1"]
    assert parallelism.enumerate_schedules(model, ParallelDegrees(8, 1, 40), 1)[-1].label == "1f1b"  # no ZB-H1


def test_labels_round_trip():
    assert ParallelDegrees.parse("8x20x2") == ParallelDegrees(8, 20, 2)
    assert ParallelDegrees(8, 20, 2).label == "8x20x2"
    assert ScheduleChoice.parse("interleaved-1f1b:4") == ScheduleChoice("interleaved-1f1b", 4)
    assert ScheduleChoice.parse("gpipe").label == "gpipe"
    with pytest.raises(simulator.InputError, match="TPxPPxDP"):
        ParallelDegrees.parse("8x20")


def test_every_enumerated_plan_constructs_and_runs_its_schedule_checks():
    model, hardware = simulator.load_model("LLaMA2-7B"), simulator.load_hardware("grayskull")
    for d in parallelism.enumerate_degrees(model, hardware):
        for b in parallelism.enumerate_microbatch_sizes(model, d, choices=[1, 2, 4, 8]):
            for choice in parallelism.enumerate_schedules(model, d, b):
                for sp, zero in itertools.product(parallelism.enumerate_sequence_parallel(model, d),
                                                  parallelism.enumerate_zero_stages(d)):
                    strategy = simulator.Strategy(
                        tp=d.tp, pp=d.pp, dp=d.dp, microbatch_size=b, schedule=choice.schedule,
                        num_chunks=choice.num_chunks, sequence_parallel=sp, zero_stage=zero)
                    check_plan(model, hardware, strategy)
                    assert d.pp * choice.num_chunks <= model.num_layers


def test_sequence_parallel_and_zero_only_where_meaningful():
    model = simulator.load_model("T-18B")
    assert parallelism.enumerate_sequence_parallel(model, ParallelDegrees(1, 4, 80)) == (False,)
    assert parallelism.enumerate_sequence_parallel(model, ParallelDegrees(8, 4, 10)) == (False, True)
    assert parallelism.enumerate_sequence_parallel(simulator.load_model("ResNet-50"),
                                                   ParallelDegrees(8, 4, 10)) == (False,)
    assert parallelism.enumerate_zero_stages(ParallelDegrees(8, 40, 1)) == (0,)
    assert parallelism.enumerate_zero_stages(ParallelDegrees(8, 20, 2)) == (0, 1, 2, 3)


def test_context_parallel_degrees_where_attention_runs_fused():
    model, h100 = simulator.load_model("LLaMA2-7B"), simulator.load_hardware("h100-cluster")
    found = parallelism.enumerate_degrees(model, h100, devices=64)
    with_cp = [d for d in found if d.cp > 1]
    assert {d.cp for d in with_cp} == {2, 4, 8, 16}
    for d in with_cp:
        assert d.tp * d.pp * d.dp * d.cp == 64 and ParallelDegrees.parse(d.label) == d
        check_plan(model, h100, simulator.Strategy(tp=d.tp, pp=d.pp, dp=d.dp, cp=d.cp))
    assert ParallelDegrees.parse("8x1x4x2") == ParallelDegrees(8, 1, 4, 2)
    assert ParallelDegrees(8, 20, 2).label == "8x20x2"  # no context parallelism: the label as before
    # meshes and the A100 preset run attention unfused: no context parallelism offered
    for name in ("wafer", "a100-cluster"):
        assert all(d.cp == 1 for d in parallelism.enumerate_degrees(model, simulator.load_hardware(name)))


def test_expert_parallelism_is_proposed_for_moe_models_only():
    hardware = simulator.load_hardware("h100-cluster")
    moe = parallelism.enumerate_degrees(simulator.load_model("Qwen3-30B-A3B"), hardware, devices=16)
    dense = parallelism.enumerate_degrees(simulator.load_model("LLaMA2-7B"), hardware, devices=16)
    assert {d.ep for d in dense} == {1}
    assert {d.ep for d in moe} == {1, 2, 4, 8, 16}
    for d in moe:  # every proposal is a legal plan: ep (times etp) divides the 128 experts and its ranks
        strategy = simulator.Strategy(**d._asdict(), sequence_parallel=d.etp is not None)
        check_plan(simulator.load_model("Qwen3-30B-A3B"), hardware, strategy)
        ranks = d.tp * d.dp * d.cp // d.etp if d.etp else d.dp * d.cp
        assert ranks % d.ep == 0 and 128 % d.ep == 0
    assert all(ParallelDegrees.parse(d.label) == d for d in moe)
    assert ParallelDegrees(1, 1, 16, 1, 16).label == "1x1x16e16"
    assert parallelism.enumerate_zero_stages(ParallelDegrees(1, 1, 16, 1, 16)) == (0, 1, 2)


def _counts(found: list[ParallelDegrees]) -> tuple[int, int]:
    """Degrees with expert tensor parallelism ``tp`` (None), and with 1 under ``tp > 1``."""
    return sum(d.etp is None for d in found), sum(d.etp == 1 for d in found)


def test_expert_tensor_parallelism_one_is_proposed_where_legal():
    # 16 GPUs of Qwen3-30B-A3B at pp 1 (128 experts; 32 heads, 4 KV heads, h 2048, ffn 6144,
    # expert ffn 768: tp 1, 2, 4, 8, 16 all split it; s 4096). cp in 1..16 divides 16 / tp; ep in
    # 1..64 divides the ranks: dp cp = 16 / tp under etp tp, tp cp dp = 16 under etp 1 (tp > 1):
    #   etp tp: tp 1: 5 eps x 5 cps = 25; tp 2: 4 x 4 = 16; tp 4: 3 x 3 = 9; tp 8: 2 x 2 = 4;
    #           tp 16: 1 x 1 = 1; 55 in all
    #   etp 1:  5 eps x (4 + 3 + 2 + 1) cps over tp 2, 4, 8, 16 = 50
    hardware, model = simulator.load_hardware("h100-cluster"), simulator.load_model("Qwen3-30B-A3B")
    at_pp1 = [d for d in parallelism.enumerate_degrees(model, hardware, devices=16) if d.pp == 1]
    assert _counts(at_pp1) == (55, 50)
    assert ParallelDegrees(2, 1, 8, 1, 16, 1).label == "2x1x8e16t1"
    assert ParallelDegrees.parse("2x1x8e16t1") == ParallelDegrees(2, 1, 8, 1, 16, 1)
    assert ParallelDegrees.parse("2x1x8t1u") == ParallelDegrees(2, 1, 8, 1, 1, 1, "users")
    # an etp equal to tp is tp's layout: the label and the degrees as without it
    assert ParallelDegrees.of(simulator.Strategy(tp=2, dp=8, ep=8, etp=2)) == ParallelDegrees(2, 1, 8, 1, 8)
    one = ParallelDegrees(2, 1, 8, 1, 16, 1)
    assert parallelism.enumerate_sequence_parallel(model, one) == (True,)  # etp < tp needs it
    assert parallelism.enumerate_zero_stages(ParallelDegrees(2, 1, 8, 1, 1, 1)) == (0, 1, 2)
    # a dense model: no etp, the same degrees as ever
    dense = parallelism.enumerate_degrees(simulator.load_model("LLaMA2-7B"), hardware, devices=16)
    assert _counts(dense)[1] == 0 and all(d.ep == 1 for d in dense)



def test_the_degrees_are_the_strategy_fields_of_the_degrees_dimension():
    # one list of strategy fields: a new degree field marked `dimension="degrees"` fails here
    # until ParallelDegrees (its label, the search's categorical) carries it too
    from spaces import DIMENSIONS

    assert ParallelDegrees._fields == DIMENSIONS["degrees"]
    strategy = simulator.Strategy(tp=2, pp=3, dp=4, cp=2, ep=8)
    assert ParallelDegrees.of(strategy) == ParallelDegrees(2, 3, 4, 2, 8)
    assert ParallelDegrees.of(strategy.to_dict()) == ParallelDegrees.of(strategy)
    assert ParallelDegrees.of({"tp": 2, "pp": 3, "dp": 4, "precision": "bf16"}) == ParallelDegrees(2, 3, 4, 1, 1)


def test_zero_stage_keeps_one_list_of_choices_per_name_across_expert_degrees():
    # ZeRO-3 is left out with ep > 1 or etp < tp: those trials name the subset, so Optuna sees one
    # list of choices per parameter name (it refuses a categorical whose choices change)
    import optuna

    study = optuna.create_study()
    asked = []
    for degrees in (ParallelDegrees(1, 1, 8), ParallelDegrees(1, 1, 8, 1, 8), ParallelDegrees(2, 1, 4, 1, 8, 1)):
        trial = study.ask()
        asked.append(parallelism.suggest_zero_stage(trial, degrees))
        assert set(trial.params) <= {"zero_stage", "zero_stage|without=3"}
        study.tell(trial, 1.0)
    assert all(stage in (0, 1, 2, 3) for stage in asked)
