"""Loaders: presets load with the published figures; bad input gives a one-line InputError."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import tomllib
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.config import MAX_INPUT_BYTES, parse_toml, split_unit
from simulator.errors import InputError
from simulator.hardware.loader import hardware_presets, load_hardware
from simulator.hardware.spec import Hbm
from simulator.network.cluster import Cluster
from simulator.network.mesh import Mesh
from simulator.strategy import Strategy
from simulator.strategy_loader import load_strategy
from simulator.workload.loader import load_model, model_presets


def preset_text(name: str) -> str:
    resource = resources.files("simulator.hardware").joinpath("presets", f"{name}.toml")
    return resource.read_text(encoding="utf-8")


def write(tmp_path: Path, text: str, name: str = "my.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def replace_line(text: str, key: str, new: str | None) -> str:
    """Replace (or drop, with ``new=None``) the line assigning ``key``."""
    pattern = re.compile(rf"^{re.escape(key)} = .*$", re.MULTILINE)
    assert pattern.search(text), key
    return pattern.sub(lambda _: new if new is not None else "", text, count=1)


def raises_one_line(call, *fragments: str) -> str:
    with pytest.raises(InputError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


# ---------------------------------------------------------------- hardware presets


def test_hardware_presets_listed():
    assert {"wafer", "a100-cluster", "grayskull"} <= set(hardware_presets())


@pytest.mark.parametrize("name", hardware_presets())
def test_every_hardware_preset_loads_with_a_source_per_number(name):
    hardware = load_hardware(name)
    assert hardware.name == name
    assert hardware.num_devices > 0
    assert all(text.strip() for text in hardware.sources.values())
    stated = {f for f in ("fused_attention_efficiency", "fused_attention_backward_efficiency", "fp8_gemm_efficiency",
                          "fp8_current_scaling_gemm_efficiency", "fp8_blockwise_gemm_efficiency")
              if getattr(hardware.calibration, f) is not None}
    assert set(hardware.calibration.sources) == {
        "gemm_efficiency", "memory_bound_efficiency", "collective_efficiency", "p2p_efficiency",
        "kernel_overhead_s", *stated}
    keys = [line.split(" = ")[0] for line in preset_text(name).splitlines() if " = " in line]
    numeric = [key for key in keys if key not in ("kind", "base") and not key.endswith("_source")]
    if "base" in keys:  # a variant: its own numbers sourced, the rest from its base
        assert all(any(path.endswith(f".{key}") for path in hardware.sources) for key in numeric)
        base = tomllib.loads(preset_text(name))["base"]
        base_keys = {line.split(" = ")[0] for line in preset_text(base).splitlines() if " = " in line}
        added = [key for key in numeric if key not in base_keys]  # keys the base leaves at their default
        assert len(hardware.sources) == len(load_hardware(base).sources) + len(added)
    else:
        assert len(hardware.sources) == len(numeric)


def test_wafer_matches_palm_table_vi():
    wafer = load_hardware("wafer")
    mesh = wafer.network
    assert isinstance(mesh, Mesh) and wafer.kind == "mesh"
    assert wafer.num_devices == 320
    assert wafer.compute.peak_flop_per_s["fp16"] == 16e12
    assert wafer.compute.peak_flop_per_s["int8"] == 32e12
    assert wafer.memory.sram.capacity_bytes == 3.75e6
    assert mesh.intra_die_link_bandwidth_bytes_per_s == 1024e9
    assert mesh.inter_die_link_bandwidth_bytes_per_s == 256e9
    assert wafer.memory.dram.bandwidth_bytes_per_s == 256e9
    assert wafer.memory.dram.capacity_bytes == 256e9
    assert mesh.hop_latency_s == 1e-9
    assert wafer.sources["mesh.intra_die_link_bandwidth_GB_per_s"].startswith("PALM Table VI")


def test_a100_cluster_matches_datasheets():
    a100 = load_hardware("a100-cluster")
    cluster = a100.network
    assert isinstance(cluster, Cluster) and a100.kind == "cluster"
    assert a100.compute.peak_flop_per_s["fp16"] == 312e12
    assert a100.num_devices == 3072
    assert cluster.inter_node_bandwidth_bytes_per_s == 25e9
    assert cluster.intra_node_bandwidth_bytes_per_s == 300e9
    assert a100.memory.hbm.capacity_bytes == 80 * 2**30
    assert cluster.inter_node_latency_s == 5e-6
    assert 0 < a100.calibration.gemm_efficiency <= 1


def test_grayskull_has_120_cores_and_the_e150_specification_peaks():
    grayskull = load_hardware("grayskull")
    assert grayskull.num_devices == 120
    assert math.isclose(grayskull.compute.peak_flop_per_s["fp16"] * 120, 83e12, rel_tol=1e-9)
    assert math.isclose(grayskull.compute.peak_flop_per_s["int8"] * 120, 368e12, rel_tol=1e-9)
    assert math.isclose(grayskull.compute.peak_flop_per_s["bfloat8_b"] * 120, 83e12, rel_tol=1e-9)
    assert "bfloat4_b" not in grayskull.compute.peak_flop_per_s


def test_hardware_from_path_equals_preset(tmp_path):
    path = write(tmp_path, preset_text("wafer"), "wafer.toml")
    assert load_hardware(path) == load_hardware("wafer")
    assert load_hardware(str(path)) == load_hardware("wafer")


def test_a_variant_states_only_what_differs_from_its_base_preset(tmp_path):
    variant = Path(__file__).parents[2] / "studies" / "hardware" / "wafer-tiled.toml"
    tiled, wafer = load_hardware(variant), load_hardware("wafer")
    assert tiled.network == wafer.network
    assert tiled.memory.dram == dataclasses.replace(wafer.memory.dram, dataflow="tiled")
    assert (tiled.calibration, tiled.compute.peak_flop_per_s, tiled.memory.sram.capacity_bytes) == \
        (wafer.calibration, wafer.compute.peak_flop_per_s, wafer.memory.sram.capacity_bytes)
    assert "tt-metal" in tiled.sources["mesh.dataflow"]
    bad = tmp_path / "bad.toml"
    bad.write_text('base = "wafr"\n')
    with pytest.raises(InputError, match=r"bad.toml: .*base.*wafr"):
        load_hardware(bad)


def test_unknown_hardware_preset_lists_presets():
    raises_one_line(lambda: load_hardware("wafr"), "'wafr'", "wafer", "a100-cluster")


# ---------------------------------------------------------------- hardware errors


def test_unknown_key_named_with_file_and_table(tmp_path):
    text = preset_text("wafer") + ""
    text = text.replace("[mesh]\n", "[mesh]\nbandwith_GB_per_s = 1\n", 1)
    path = write(tmp_path, text)
    message = raises_one_line(lambda: load_hardware(path), str(path), "[mesh]", "bandwith_GB_per_s")
    assert message == f"{path} [mesh]: unknown key 'bandwith_GB_per_s' (did you mean 'dram_bandwidth_GB_per_s'?)"


def test_preset_errors_name_the_package_path():
    root = parse_toml("[mesh]\nbandwith_GB_per_s = 1\n", "simulator/hardware/presets/wafer.toml")
    with pytest.raises(InputError, match=re.escape(
            "simulator/hardware/presets/wafer.toml [mesh]: unknown key 'bandwith_GB_per_s'")):
        root.take_table("mesh").finish()


def test_missing_key(tmp_path):
    path = write(tmp_path, replace_line(preset_text("wafer"), "hop_latency_ns", None))
    raises_one_line(lambda: load_hardware(path), str(path), "[mesh]", "hop_latency")


def test_missing_source(tmp_path):
    path = write(tmp_path, replace_line(preset_text("wafer"), "dies_x_source", None))
    raises_one_line(lambda: load_hardware(path), str(path), "[mesh]", "dies_x_source")


def test_negative_number(tmp_path):
    path = write(tmp_path, replace_line(preset_text("wafer"), "fp16_TFLOP_per_s", "fp16_TFLOP_per_s = -3"))
    message = raises_one_line(lambda: load_hardware(path), str(path), "[device.peak]", "fp16_TFLOP_per_s")
    assert message.startswith(f"{path} [device.peak]: key 'fp16_TFLOP_per_s' must be in [1e-06, 1,000,000] TFLOP_per_s")
    assert message.endswith("got -3")


@pytest.mark.parametrize(("key", "line"), [
    ("dies_x", 'dies_x = "5"'),
    ("dies_x", "dies_x = 2.5"),
    ("gemm_efficiency", "gemm_efficiency = 1.5"),
    ("gemm_efficiency", "gemm_efficiency = true"),
    ("dram_ports_per_die", "dram_ports_per_die = 3"),
    ("hop_latency_ns", "hop_latency_ns = nan"),
    ("kind", 'kind = "torus"'),
])
def test_wrong_type_or_range(tmp_path, key, line):
    path = write(tmp_path, replace_line(preset_text("wafer"), key, line))
    raises_one_line(lambda: load_hardware(path), str(path), key)


def test_same_quantity_in_two_units_is_rejected(tmp_path):
    text = preset_text("wafer").replace("hop_latency_ns = 1\n", "hop_latency_ns = 1\nhop_latency_us = 1e-3\n")
    path = write(tmp_path, text)
    raises_one_line(lambda: load_hardware(path), str(path), "hop_latency_us")


def test_toml_syntax_error_names_file_line_and_column(tmp_path):
    path = write(tmp_path, 'kind = "mesh"\n[device\n')
    raises_one_line(lambda: load_hardware(path), str(path), "line 2")


def test_missing_file():
    raises_one_line(lambda: load_hardware("no/such/file.toml"), "no/such/file.toml")


@pytest.mark.parametrize(("key", "si_name", "factor"), [
    ("link_bandwidth_GB_per_s", "link_bandwidth_bytes_per_s", 1e9),
    ("nic_bandwidth_Gb_per_s", "nic_bandwidth_bytes_per_s", 1e9 / 8),
    ("hbm_bandwidth_TB_per_s", "hbm_bandwidth_bytes_per_s", 1e12),
    ("dram_capacity_GiB", "dram_capacity_bytes", 2**30),
    ("sram_MiB", "sram_bytes", 2**20),
    ("sram_MB", "sram_bytes", 1e6),
    ("dram_capacity_GB", "dram_capacity_bytes", 1e9),
    ("fp16_TFLOP_per_s", "fp16_flop_per_s", 1e12),
    ("int8_TOP_per_s", "int8_flop_per_s", 1e12),
    ("hop_latency_ns", "hop_latency_s", 1e-9),
    ("kernel_overhead_us", "kernel_overhead_s", 1e-6),
    ("step_s", "step_s", 1.0),
    ("dies_x", "dies_x", 1.0),
])
def test_unit_suffixes(key, si_name, factor):
    assert split_unit(key)[1:] == (si_name, factor)


JUNK = st.one_of(
    st.integers(min_value=-10**30, max_value=10**30), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.text(max_size=10), st.lists(st.integers(), max_size=3),
)
NUMERIC_KEYS = ["dies_x", "fp16_TFLOP_per_s", "hop_latency_ns", "gemm_efficiency", "dram_ports_per_die",
                "sram_MB"]


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return json.dumps(value)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(NUMERIC_KEYS), value=JUNK)
def test_junk_values_give_input_error_or_a_valid_load(tmp_path, key, value):
    path = write(tmp_path, replace_line(preset_text("wafer"), key, f"{key} = {toml_value(value)}"))
    try:
        hardware = load_hardware(path)
    except InputError as error:
        assert "\n" not in str(error) and str(path) in str(error)
    else:
        assert hardware.num_devices > 0


# ---------------------------------------------------------------- models


@pytest.mark.parametrize("name", model_presets())
def test_every_model_preset_loads(name):
    model = load_model(name)
    assert model.name == name
    if model.is_transformer:
        assert model.hidden_size % model.num_heads == 0


@pytest.mark.parametrize(("alias", "name"), [
    ("T-18.4B", "T-18B"), ("T-39.1B", "T-39B"), ("T-76.1B", "T-76B"), ("T-145.6B", "T-145B"),
    ("T-310.1B", "T-310B"), ("T-529.6B", "T-530B"), ("T-1008B", "T-1T"), ("t-145b", "T-145B"),
    ("gpt3-175b", "GPT3-175B"), ("resnet-50", "ResNet-50"),
])
def test_model_aliases(alias, name):
    assert load_model(alias) == load_model(name)


def test_megatron_rows():
    model = load_model("T-145.6B")
    shape = (model.num_layers, model.hidden_size, model.num_heads, model.global_batch_size)
    assert shape == (80, 12288, 96, 2304)
    assert (model.sequence_length, model.vocab_size, model.ffn_hidden_size) == (2048, 51200, 4 * 12288)
    assert load_model("T-1T").num_layers == 128
    assert load_model("ResNet-50").image_size == 224


MODEL_TOML = """[model]
source = "test"
architecture = "gpt"
num_layers = 2
hidden_size = 64
num_heads = 4
ffn_hidden_size = 256
sequence_length = 16
vocab_size = 100
global_batch_size = 8
"""


def test_model_from_file(tmp_path):
    model = load_model(write(tmp_path, MODEL_TOML, "tiny.toml"))
    assert model.name == "tiny" and model.hidden_size == 64


@pytest.mark.parametrize(("key", "line"), [
    ("num_heads", "num_heads = 5"),
    ("architecture", 'architecture = "lstm"'),
    ("num_layers", "num_layers = 0"),
    ("hidden_size", "hidden_size = 64.0"),
    ("source", 'source = ""'),
])
def test_bad_model_file(tmp_path, key, line):
    path = write(tmp_path, replace_line(MODEL_TOML, key, line))
    raises_one_line(lambda: load_model(path), str(path), "[model]", key)


def test_model_file_unknown_and_missing_keys(tmp_path):
    path = write(tmp_path, MODEL_TOML + "num_expert_groups = 8\n")
    raises_one_line(lambda: load_model(path), str(path), "[model]", "unknown key 'num_expert_groups'")
    path = write(tmp_path, replace_line(MODEL_TOML, "vocab_size", None))
    raises_one_line(lambda: load_model(path), str(path), "[model]", "missing key 'vocab_size'")


def test_model_file_with_grouped_query_attention(tmp_path):
    heads = load_model(write(tmp_path, MODEL_TOML)).num_heads
    model = load_model(write(tmp_path, MODEL_TOML + f"num_kv_heads = {heads // 2}\n"))
    assert model.kv_heads == heads // 2 and model.kv_hidden_size == model.hidden_size // 2
    path = write(tmp_path, MODEL_TOML + f"num_kv_heads = {heads - 1}\n")
    raises_one_line(lambda: load_model(path), str(path), "num_kv_heads", "must divide num_heads")


def test_unknown_model_lists_presets():
    raises_one_line(lambda: load_model("T-2B"), "'T-2B'", "T-1.7B", "GPT3-175B")


# ---------------------------------------------------------------- strategies


STRATEGY = Strategy(tp=8, pp=4, dp=2, microbatch_size=2, schedule="interleaved-1f1b", num_chunks=2,
                    recompute="selective", zero_stage=1, partition="explicit",
                    stage_layers=(2, 3, 3, 2, 2, 3, 3, 2), placement="line", group_layout="strided")


def to_toml(data: dict) -> str:
    lines = ["[strategy]"]
    for key, value in data.items():
        if value is not None:
            lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def test_strategy_toml_round_trip(tmp_path):
    assert load_strategy(write(tmp_path, to_toml(STRATEGY.to_dict()), "s.toml")) == STRATEGY


def test_strategy_json_round_trip(tmp_path):
    path = write(tmp_path, json.dumps(STRATEGY.to_dict()), "s.json")
    assert load_strategy(path) == STRATEGY
    best = write(tmp_path, json.dumps({"objective": 1.5, "strategy": STRATEGY.to_dict()}), "best.json")
    assert load_strategy(best) == STRATEGY


def test_strategy_explicit_devices_round_trip(tmp_path):
    strategy = Strategy(tp=2, pp=2, placement="explicit", stage_devices=((0, 1), (2, 3)),
                        global_batch_size=16)
    assert load_strategy(write(tmp_path, json.dumps(strategy.to_dict()), "s.json")) == strategy
    assert load_strategy(write(tmp_path, to_toml(strategy.to_dict()), "s.toml")) == strategy


@pytest.mark.parametrize(("name", "text", "fragment"), [
    ("s.toml", "[strategy]\ntp = 0\n", "tp"),
    ("s.toml", "[strategy]\nteepee = 2\n", "teepee"),
    ("s.toml", "[strateg]\ntp = 2\n", "strategy"),
    ("s.toml", "[strategy\n", "line 1"),
    ("s.json", '{"tp": 2, "schedule": "zigzag"}', "schedule"),
    ("s.json", "[1, 2]", "JSON object"),
    ("s.json", "{tp: 2}", "invalid JSON"),
])
def test_bad_strategy_files(tmp_path, name, text, fragment):
    path = write(tmp_path, text, name)
    raises_one_line(lambda: load_strategy(path), str(path), fragment)


def test_h200_is_the_h100_cluster_with_more_and_faster_memory():
    h100, h200 = load_hardware("h100-cluster"), load_hardware("h200-cluster")
    assert h100.network == h200.network
    assert h200.memory.hbm == Hbm(bandwidth_bytes_per_s=4.8e12, capacity_bytes=141e9)
    assert dataclasses.replace(h100.calibration, memory_bound_efficiency=0.835) == h200.calibration
    assert h100.compute == h200.compute and h100.compute.peak_flop_per_s["bf16"] == 989.4e12


@pytest.mark.parametrize(("key", "value", "shown"), [
    ("gemm_efficiency", "1e-300", "[0.01, 1]"),        # a fraction of peak
    ("sram_MB", "1e300", "[0.001, 1e+09] MB"),          # 1 kB to 1 PB a device
    ("dram_bandwidth_GB_per_s", "1e-300", "[0.001, 1e+08] GB_per_s"),
    ("hop_latency_ns", "5e9", "[0, 1e+09] ns"),         # at most a second
    ("dies_x", "2000000", "[1, 1,048,576]"),            # a count
])
def test_implausible_quantities_are_refused_with_their_range_and_reason(tmp_path, key, value, shown):
    path = write(tmp_path, replace_line(preset_text("wafer"), key, f"{key} = {value}"))
    message = raises_one_line(lambda: load_hardware(path), str(path), key, shown, "got ")
    assert "(" in message.split(shown, 1)[1]  # the reason follows the range


def test_more_devices_than_a_machine_may_have_is_refused(tmp_path):
    text = replace_line(preset_text("wafer"), "dies_x", "dies_x = 1000")
    path = write(tmp_path, replace_line(text, "dies_y", "dies_y = 100"))
    raises_one_line(lambda: load_hardware(path), str(path), "[mesh]", "1,600,000 devices", "262,144")


def test_model_counts_beyond_any_published_model_are_refused(tmp_path):
    path = write(tmp_path, replace_line(MODEL_TOML, "num_layers", "num_layers = 1000000"))
    raises_one_line(lambda: load_model(path), str(path), "num_layers", "20000", "1000000")


@pytest.mark.parametrize("kind", ["directory", "fifo", "loop", "binary", "huge", "missing"])
def test_every_unreadable_input_file_is_one_line_naming_it(tmp_path, kind):
    path = tmp_path / "hw.toml"
    expected = {"directory": "not a regular file (a directory)", "fifo": "not a regular file (a FIFO)",
                "loop": "cannot read file", "binary": "not UTF-8 text (byte 0xff at offset 3)",
                "huge": "more than an input file's", "missing": "cannot read file"}[kind]
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # opening it would wait for a writer: it must be refused before
    elif kind == "loop":
        path.symlink_to(path)
    elif kind == "binary":
        path.write_bytes(b"a =\xff\xfe")
    elif kind == "huge":
        with path.open("wb") as file:
            file.truncate(MAX_INPUT_BYTES + 1)
    for load in (load_hardware, load_model, load_strategy):
        raises_one_line(lambda load=load: load(path), str(path), expected)


def test_every_problem_of_a_hardware_file_comes_in_one_message_with_the_near_misses_named(tmp_path):
    text = replace_line(preset_text("wafer"), "hop_latency_ns", "hop_latency_ms = 1")  # not a unit
    text = replace_line(text, "dies_x", "dies_x = 0")
    text = replace_line(text, "gemm_efficiency", "gemm_efficency = 0.9")  # a typo
    path = write(tmp_path, text)
    message = raises_one_line(lambda: load_hardware(path), str(path), "5 problems",
                              "key 'dies_x' must be in [1,", "missing key 'hop_latency_us'",
                              "unknown key 'hop_latency_ms' (did you mean 'hop_latency_s'?)",
                              "key 'hop_latency_ns_source' cites 'hop_latency_ns', which the table does not give",
                              "unknown key 'gemm_efficency' (did you mean 'gemm_efficiency'?)")
    assert message.count("[mesh]") == 3 and message.count("[calibration]") == 2


def test_wormhole_presets_carry_the_unpacker_table_and_blackhole_none():
    for name in ("wormhole-n150", "wormhole-n300", "wormhole-quietbox", "wormhole-galaxy"):
        unpacker = load_hardware(name).compute.unpacker
        assert unpacker is not None and unpacker.read_bandwidth_bytes_per_s == 64e9, name
    assert all(load_hardware(name).compute.unpacker is None for name in ("blackhole-p150", "grayskull"))


def test_unpacker_missing_key_or_bad_value_is_named(tmp_path):
    missing = write(tmp_path, replace_line(preset_text("wormhole-n150"), "subblock_tiles", None))
    raises_one_line(lambda: load_hardware(missing), str(missing), "[device.unpacker]", "subblock_tiles")
    zero = write(tmp_path, replace_line(preset_text("wormhole-n150"), "subblock_tiles", "subblock_tiles = 0"), "z.toml")
    raises_one_line(lambda: load_hardware(zero), str(zero), "unpacker")


def test_tenstorrent_presets_carry_the_data_movement_table(tmp_path):
    for name in ("wormhole-n150", "wormhole-galaxy", "blackhole-p150"):
        moves = load_hardware(name).compute.data_movement
        assert moves is not None and moves.dram_read_latency_s > 0, name
    assert load_hardware("wafer").compute.data_movement is None
    missing = write(tmp_path, replace_line(preset_text("wormhole-n150"), "multicast_bandwidth_GB_per_s", None))
    raises_one_line(lambda: load_hardware(missing), str(missing), "[device.data_movement]", "multicast_bandwidth")
    zero = write(tmp_path, replace_line(preset_text("blackhole-p150"), "dram_read_bandwidth_GB_per_s",
                                        "dram_read_bandwidth_GB_per_s = 0"), "z.toml")
    raises_one_line(lambda: load_hardware(zero), str(zero), "data_movement")


def test_num_classes_is_a_transformer_head_only(tmp_path):
    assert load_model("BERT-base-SST-2").num_classes == 2 and load_model("BERT-base").num_classes == 0
    path = write(tmp_path, """[model]
source = "test"
architecture = "resnet50"
num_layers = 50
hidden_size = 0
num_heads = 0
ffn_hidden_size = 0
sequence_length = 1
vocab_size = 1000
global_batch_size = 256
image_size = 224
num_classes = 10
""")
    raises_one_line(lambda: load_model(path), str(path), "num_classes")


def test_a_global_batch_beyond_the_bound_is_refused_in_a_strategy():
    """A strategy's global batch is bounded as a model file's is (``MAX_GLOBAL_BATCH_SIZE``, the
    one constant both read): the search lists the divisors of a replica's batch, which for 10^18
    samples took hours."""
    from simulator.strategy import MAX_GLOBAL_BATCH_SIZE

    assert Strategy(global_batch_size=MAX_GLOBAL_BATCH_SIZE).global_batch_size == MAX_GLOBAL_BATCH_SIZE
    with pytest.raises(InputError, match=r"`global_batch_size` must be at most 16,777,216 samples .* got 10+$"):
        Strategy(global_batch_size=10**18)
