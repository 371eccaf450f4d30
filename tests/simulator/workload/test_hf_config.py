"""Hugging Face ``config.json`` files load to the presets' shapes; bad ones are one-line errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from simulator import load_model
from simulator.errors import InputError

CONFIGS = Path(__file__).parent / "hf_configs"
NAMES = ["Llama-3.1-8B", "Mixtral-8x7B", "Qwen3-30B-A3B", "Qwen3-235B-A22B", "DeepSeek-V3", "GPT-OSS-120B"]


@pytest.mark.parametrize("name", NAMES)
def test_a_config_loads_to_the_presets_shapes(name):
    # the config holds no training batch and its longest context as the sequence
    loaded = load_model(str(CONFIGS / f"{name}.json"))
    preset = load_model(name)
    assert loaded.global_batch_size == 1
    assert dataclasses.replace(loaded, sequence_length=preset.sequence_length,
                               global_batch_size=preset.global_batch_size) == preset


def test_a_model_file_takes_the_config_and_sets_the_run(tmp_path):
    path = tmp_path / "qwen.toml"
    path.write_text(f'[model]\nhf_config = "{CONFIGS / "Qwen3-30B-A3B.json"}"\nsequence_length = 4096\n'
                    "global_batch_size = 1024\n")
    assert load_model(path) == dataclasses.replace(load_model("Qwen3-30B-A3B"), name="qwen")


def _config(tmp_path: Path, **changes) -> str:
    config = json.loads((CONFIGS / "Mixtral-8x7B.json").read_text())
    config.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del config[key]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize(("changes", "message"), [
    ({"architectures": ["FalconForCausalLM"]}, "key 'architectures' must name one of"),
    ({"num_local_experts": None}, "missing key 'num_local_experts'"),
    ({"hidden_size": None}, "missing key 'hidden_size'"),
    ({"num_experts_per_tok": 16}, "'experts_per_token' must be at most num_experts 8, got 16"),
    ({"hidden_size": -1}, "key 'hidden_size' must be"),
])
def test_a_bad_config_is_a_one_line_error_naming_file_and_key(tmp_path, changes, message):
    path = _config(tmp_path, **changes)
    with pytest.raises(InputError, match=message) as info:
        load_model(path)
    assert path in str(info.value) and "\n" not in str(info.value)


def test_qwen_dense_layers_are_refused(tmp_path):
    config = json.loads((CONFIGS / "Qwen3-30B-A3B.json").read_text())
    config["mlp_only_layers"] = [0, 1]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match="key 'mlp_only_layers'"):
        load_model(str(path))
