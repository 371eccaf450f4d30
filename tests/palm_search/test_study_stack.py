"""A study's software stack: the `stack` key, its checks, and the evaluations it keys."""

from __future__ import annotations

import pytest

from palm_search.search.evaluate import cache_key, evaluate
from palm_search.search.study import load_study, spec_from_attrs, spec_to_attrs
from simulator import MEGATRON_CORE, InputError, Strategy, load_hardware, load_model, load_stack

STUDY = '[study]\nmodel = "T-1.7B"\nhardware = "a100-cluster"\n'


def test_the_stack_key_names_a_preset_and_survives_storage(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(STUDY + 'stack = "deepspeed-0.3-zero3"\n')
    spec = load_study(path)
    assert spec.stack == "deepspeed-0.3-zero3" and spec_from_attrs(spec_to_attrs(spec)) == spec
    path.write_text(STUDY)
    assert load_study(path).stack == "megatron-core"


def test_an_unknown_stack_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(STUDY + 'stack = "deepspeed"\n')
    with pytest.raises(InputError, match=rf"^{path}: stack: unknown preset 'deepspeed'"):
        load_study(path)


def test_evaluations_under_another_stack_have_their_own_key_and_result():
    model, hardware = load_model("T-1.7B"), load_hardware("a100-cluster")
    strategy = Strategy(dp=4, global_batch_size=8, zero_stage=3)
    deepspeed = load_stack("deepspeed-0.3-zero3")
    assert cache_key(model, hardware, strategy, "sharing") == cache_key(model, hardware, strategy, "sharing",
                                                                          MEGATRON_CORE)
    assert cache_key(model, hardware, strategy, "sharing") != cache_key(model, hardware, strategy, "sharing", deepspeed)
    default = evaluate(model, hardware, strategy, "analytical")
    slower = evaluate(model, hardware, strategy, "analytical", stack=deepspeed)
    assert slower["samples_per_s"] < default["samples_per_s"]


def test_the_screen_estimates_each_point_under_the_studys_stack(tmp_path):
    # the screen ranks the points its trials then simulate: under the study's stack (it once
    # estimated every study under Megatron-Core's, 2.5x off for tt-transformers' serving rows)
    import optuna

    from palm_search.search.driver import open_search
    from simulator import estimate_samples_per_s

    path = tmp_path / "s.toml"
    path.write_text(STUDY + 'stack = "deepspeed-0.3-zero3"\ntrials = 2\n')
    search = open_search(load_study(path), run_dir=tmp_path / "run", jobs=1)
    assert search.screened is not None
    ranked, _ = search.screened.ranked()
    deepspeed, differ = load_stack("deepspeed-0.3-zero3"), 0
    zero3 = [(params, value) for params, value in ranked[:] if params.get("zero_stage") == 3]
    for params, value in ranked[:4] + zero3[:4]:
        strategy = search.build(optuna.trial.FixedTrial(params)).strategy
        assert value == pytest.approx(estimate_samples_per_s(search.model, search.hardware, strategy,
                                                             stack=deepspeed), rel=1e-9)
        differ += value != pytest.approx(estimate_samples_per_s(search.model, search.hardware, strategy), rel=1e-6)
    assert differ
