"""A model's shapes from its Hugging Face ``config.json`` (no weights), as a model table.

Each supported architecture (the config's ``architectures[0]``) names the keys it reads; the
result is the table :func:`simulator.workload.loader.load_model` checks as it checks a TOML
model (:class:`~simulator.workload.spec.ModelSpec` names). Sources: the ``transformers``
configuration classes (``LlamaConfig``, ``MistralConfig``, ``MixtralConfig``, ``Qwen2Config``,
``Qwen3Config``, ``Qwen3MoeConfig``, ``DeepseekV3Config``, ``GptOssConfig``) and the models'
``modeling_*.py`` layer rules. Every architecture is a SwiGLU decoder with RMSNorm and untied
logits (``llama``). The config gives no training batch: ``global_batch_size`` is 1 (a strategy
or a TOML model with ``hf_config`` sets it) and ``sequence_length`` is ``max_position_embeddings``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simulator.config import read_text_file
from simulator.errors import InputError

_COMMON = {"hidden_size": "hidden_size", "ffn_hidden_size": "intermediate_size", "num_layers": "num_hidden_layers",
           "num_heads": "num_attention_heads", "vocab_size": "vocab_size",
           "sequence_length": "max_position_embeddings"}
"""ModelSpec key -> config key, read for every architecture."""

_EXPERTS: dict[str, dict[str, str]] = {
    "MixtralForCausalLM": {"num_experts": "num_local_experts", "experts_per_token": "num_experts_per_tok",
                           "expert_ffn_hidden_size": "intermediate_size"},
    "Qwen3MoeForCausalLM": {"num_experts": "num_experts", "experts_per_token": "num_experts_per_tok",
                            "expert_ffn_hidden_size": "moe_intermediate_size"},
    "GptOssForCausalLM": {"num_experts": "num_local_experts", "experts_per_token": "num_experts_per_tok",
                          "expert_ffn_hidden_size": "intermediate_size"},
    "DeepseekV3ForCausalLM": {"num_experts": "n_routed_experts", "experts_per_token": "num_experts_per_tok",
                              "expert_ffn_hidden_size": "moe_intermediate_size",
                              "num_shared_experts": "n_shared_experts", "first_dense_layers": "first_k_dense_replace",
                              "moe_layer_period": "moe_layer_freq", "kv_lora_rank": "kv_lora_rank",
                              "qk_nope_head_dim": "qk_nope_head_dim", "qk_rope_head_dim": "qk_rope_head_dim",
                              "v_head_dim": "v_head_dim"},
}
"""ModelSpec key -> config key of each Mixture-of-Experts architecture's extra keys."""

ARCHITECTURES: tuple[str, ...] = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                                  *_EXPERTS)
"""The ``architectures`` a config may name."""

ALIASES = {"num_experts_per_tok": "experts_per_token"}
"""Config keys some releases spell otherwise (openai/gpt-oss's ``experts_per_token``)."""


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The model table of the Hugging Face config ``path`` (ModelSpec keys, plus ``source``).

    Raises:
        InputError: one line naming the file and the key: unreadable or not JSON, an unknown
            architecture, a missing key, or a layer layout not modelled (Qwen3-MoE dense layers).
    """
    name = str(path)
    try:
        config = json.loads(read_text_file(path))
    except json.JSONDecodeError as error:
        raise InputError(f"{name}: invalid JSON: {error}") from None
    if not isinstance(config, dict):
        raise InputError(f"{name}: expected a JSON object, got {type(config).__name__}")
    architectures = config.get("architectures")
    architecture = architectures[0] if isinstance(architectures, list) and architectures else None
    if architecture not in ARCHITECTURES:
        raise InputError(f"{name}: key 'architectures' must name one of {list(ARCHITECTURES)}, got {architectures!r}")
    keys = {**_COMMON, **_EXPERTS.get(architecture, {})}
    table: dict[str, Any] = {key: _take(config, source, name) for key, source in keys.items()}
    table.update(source=f"Hugging Face config {Path(name).name} ({architecture})", architecture="llama",
                 global_batch_size=1, **_attention(config, table))
    if architecture == "DeepseekV3ForCausalLM" and config.get("q_lora_rank"):
        table["q_lora_rank"] = config["q_lora_rank"]
    if architecture == "Qwen3MoeForCausalLM":
        _check_qwen_layers(config, name)
    table.update(_window(config, architecture, table["num_layers"], name))
    return table


def _take(config: dict[str, Any], key: str, name: str) -> Any:
    """``config[key]`` (or its :data:`ALIASES` spelling).

    Raises:
        InputError: neither is in the config.
    """
    for spelling in (key, ALIASES.get(key)):
        if spelling in config and config[spelling] is not None:
            return config[spelling]
    raise InputError(f"{name}: missing key '{key}'")


def _attention(config: dict[str, Any], table: dict[str, Any]) -> dict[str, Any]:
    """Key/value heads (``num_key_value_heads``, default the heads) and a ``head_dim`` other than
    ``hidden_size / num_attention_heads``, where the config gives them (latent attention has none)."""
    out: dict[str, Any] = {}
    heads = table["num_heads"]
    if config.get("num_key_value_heads") not in (None, heads) and "kv_lora_rank" not in table:
        out["num_kv_heads"] = config["num_key_value_heads"]
    head_dim = config.get("head_dim")
    if head_dim and "kv_lora_rank" not in table and head_dim * heads != table["hidden_size"]:
        out["head_dim"] = head_dim
    return out


_QWEN = ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM")
_WINDOWED, _FULL = "sliding_attention", "full_attention"


def _window(config: dict[str, Any], architecture: str, layers: object, name: str) -> dict[str, Any]:
    """``sliding_window`` and ``sliding_window_pattern`` of the config's windowed layers: those
    ``layer_types`` names ``sliding_attention`` (``transformers`` >= 4.53 writes the list; layer
    ``i`` attends to the whole context when ``(i + 1) % p == 0``, 0: every layer windowed);
    without the list, ``GptOssConfig``'s default alternation from a windowed first layer (``p =
    2``), Mistral's and Mixtral's ``sliding_window`` on every layer, and none for Qwen unless
    ``use_sliding_window`` (``Qwen2Config``: the layers from ``max_window_layers`` on). The
    window itself is checked as every count is (:func:`simulator.workload.loader.load_model`);
    nothing is derived where ``num_hidden_layers`` is not a count, which the loader refuses.

    Raises:
        InputError: naming the key: ``layer_types`` not a list of the two kinds per layer,
            ``max_window_layers`` not an integer, or a layout no pattern gives (Qwen's windowed
            last layers).
    """
    window = config.get("sliding_window")
    if not window or not isinstance(layers, int) or isinstance(layers, bool):
        return {}
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or any(kind not in (_WINDOWED, _FULL) for kind in types):
            raise InputError(f"{name}: key 'layer_types' must list {_WINDOWED!r} or {_FULL!r} for each of the"
                             f" {layers} layers, got {types!r}")
        windowed = [kind == _WINDOWED for kind in types]
        if not any(windowed):
            return {}
        pattern = 0 if all(windowed) else next(
            (p for p in range(2, layers + 1) if windowed == [(index + 1) % p != 0 for index in range(layers)]), None)
        if pattern is None:
            raise InputError(f"{name}: key 'layer_types': windowed layers {[i for i, w in enumerate(windowed) if w]}"
                             " follow no pattern of full-attention layers every p-th layer (not modelled)")
    elif architecture in _QWEN:
        stop = config.get("max_window_layers", layers) if config.get("use_sliding_window") else layers
        if not isinstance(stop, int) or isinstance(stop, bool):
            raise InputError(f"{name}: key 'max_window_layers' must be an integer, got {stop!r}")
        if stop >= layers:
            return {}
        if stop > 0:
            raise InputError(f"{name}: key 'max_window_layers' = {stop}: windowed layers from {stop} of {layers}"
                             " follow no pattern of full-attention layers every p-th layer (not modelled)")
        pattern = 0
    else:
        pattern = 2 if architecture == "GptOssForCausalLM" else 0
    return {"sliding_window": window, **({"sliding_window_pattern": pattern} if pattern else {})}


def _check_qwen_layers(config: dict[str, Any], name: str) -> None:
    """Qwen3-MoE makes layer ``i`` dense when it is in ``mlp_only_layers`` or ``(i + 1) %
    decoder_sparse_step != 0`` (``modeling_qwen3_moe.py``); only all-MoE layouts are modelled.

    Raises:
        InputError: naming the key.
    """
    if config.get("mlp_only_layers"):
        raise InputError(f"{name}: key 'mlp_only_layers' = {config['mlp_only_layers']!r}: dense layers among"
                         " Qwen3-MoE layers are not modelled")
    if config.get("decoder_sparse_step", 1) != 1:
        raise InputError(f"{name}: key 'decoder_sparse_step' = {config['decoder_sparse_step']!r}: only 1 (every"
                         " layer MoE) is modelled")
