"""Load a :class:`~simulator.workload.spec.ModelSpec` from a preset name or a TOML file.

Presets live in ``simulator/workload/presets/models.toml``, one table per model::

    ["T-18B"]
    aliases = ["T-18.4B"]            # optional other names
    source = "Narayanan et al. SC'21 Table 1, row 18.4B ..."
    architecture = "gpt"             # gpt | llama | bert | resnet50
    num_layers = 40
    hidden_size = 6144
    num_heads = 48
    ffn_hidden_size = 24576
    sequence_length = 2048
    vocab_size = 51200
    global_batch_size = 1024
    image_size = 224                 # resnet50 only
    num_kv_heads = 8                 # optional: grouped-query attention (default: num_heads)
    num_classes = 2                  # optional: a classification head instead of the LM head
    head_dim = 128                   # optional: head width where it is not hidden_size / num_heads

Mixture-of-Experts models (``llama`` only: SwiGLU experts) add ``num_experts``,
``experts_per_token``, ``expert_ffn_hidden_size`` and optionally ``num_shared_experts``,
``shared_expert_ffn_hidden_size``, ``first_dense_layers``, ``moe_layer_period`` and
``expert_load_imbalance``; multi-head latent attention adds ``kv_lora_rank``,
``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim`` and optionally ``q_lora_rank``;
sliding-window attention (a causal ``gpt`` or ``llama``) adds ``sliding_window`` and optionally
``sliding_window_pattern`` (:class:`~simulator.workload.spec.ModelSpec` describes each).

A user file holds one table ``[model]`` with the same keys; the model is named after the file.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import cast, get_args

from simulator.config import Table, parse_toml, read_toml
from simulator.errors import InputError
from simulator.strategy import MAX_GLOBAL_BATCH_SIZE
from simulator.workload.hf_config import read_hf_config
from simulator.workload.spec import Architecture, ModelSpec

_PRESETS_DISPLAY = "simulator/workload/presets/models.toml"
_ARCHITECTURES: tuple[str, ...] = get_args(Architecture)
_COUNTS = ("num_layers", "hidden_size", "num_heads", "ffn_hidden_size", "sequence_length", "vocab_size",
           "global_batch_size")
_TRANSFORMER_ONLY = ("hidden_size", "num_heads", "ffn_hidden_size")
MAX_COUNTS = {
    "num_layers": 20_000,          # 100x the deepest published LLMs (Llama 3 405B: 126 layers)
    "hidden_size": 2**21,          # ~100x the widest (Megatron 1T: 25,600)
    "num_heads": 2**16,            # ~500x the most (Megatron 1T: 160)
    "ffn_hidden_size": 2**23,      # ~100x the widest (Megatron 1T: 102,400)
    "sequence_length": 2**27,      # ~13x the longest context announced (Llama 4 Scout: 10M tokens)
    "vocab_size": 2**25,           # ~130x the largest (Gemma: 256k)
    "global_batch_size": MAX_GLOBAL_BATCH_SIZE,  # ~100x the largest published batches (in samples)
    "image_size": 2**16,           # a 65,536-pixel side, ~300x ImageNet's 224
    "num_kv_heads": 2**16,         # as num_heads
    "num_classes": 2**25,          # as vocab_size
    "head_dim": 2**16,             # ~100x the widest heads (256)
    "num_experts": 2**16,          # ~250x the most routed experts (DeepSeek-V3, Kimi K2: 256, 384)
    "experts_per_token": 2**10,    # ~100x the most (Kimi K2: 8)
    "expert_ffn_hidden_size": 2**23,  # as ffn_hidden_size
    "num_shared_experts": 2**10,   # ~1000x the most (DeepSeek-V3: 1)
    "shared_expert_ffn_hidden_size": 2**23,  # as ffn_hidden_size
    "first_dense_layers": 20_000,  # as num_layers
    "moe_layer_period": 20_000,    # as num_layers
    "q_lora_rank": 2**21,          # as hidden_size
    "kv_lora_rank": 2**21,         # as hidden_size
    "qk_nope_head_dim": 2**16,     # as head_dim
    "qk_rope_head_dim": 2**16,     # as head_dim
    "v_head_dim": 2**16,           # as head_dim
    "sliding_window": 2**27,       # as sequence_length
    "sliding_window_pattern": 20_000,  # as num_layers
}
"""Largest value a model file may give each count: about 100x what any published model has (in
the comments), so a typo or a wrong unit is refused instead of simulated for hours."""


def model_presets() -> list[str]:
    """Names of the bundled model presets, in file order (aliases excluded)."""
    return list(dict.fromkeys(name for name, _ in _presets().values()))


def load_model(name_or_path: str | Path) -> ModelSpec:
    """Load a preset by name or alias (case-insensitive, e.g. ``"t-145.6b"``) or a TOML file.

    A string ending in ``.json`` is a Hugging Face ``config.json``
    (:func:`~simulator.workload.hf_config.read_hf_config`); one containing ``/`` or ending in
    ``.toml`` is a path to a file with one ``[model]`` table, which may name such a config in
    ``hf_config`` (relative to the file) and give or override keys beside it (the training
    ``sequence_length`` and ``global_batch_size`` the config does not hold); anything else
    names a preset.

    Raises:
        InputError: unknown preset (the message lists the presets), unreadable or invalid file,
            unknown or missing key, wrong type, or a value out of range.
    """
    text = str(name_or_path)
    if text.endswith(".json"):
        return _build(Table(file=text, path="", data=read_hf_config(text)), Path(text).stem)[0]
    if isinstance(name_or_path, Path) or "/" in text or text.endswith(".toml"):
        root = read_toml(name_or_path)
        model, _ = _build(_with_hf_config(root.take_table("model"), Path(text).parent), Path(text).stem)
        root.finish()
        return model
    found = _presets().get(text.lower())
    if found is None:
        raise InputError(f"model: unknown preset {text!r} (presets: {model_presets()})")
    return found[1]


def _with_hf_config(table: Table, folder: Path) -> Table:
    """``table`` over the keys of the Hugging Face config its ``hf_config`` names, if any.

    Raises:
        InputError: as :func:`~simulator.workload.hf_config.read_hf_config`.
    """
    if not table.has("hf_config"):
        return table
    config = read_hf_config(folder / table.take_string("hf_config"))
    return Table(file=table.file, path=table.path,
                 data={**config, **{k: v for k, v in table.data.items() if k != "hf_config"}})


@functools.cache
def _presets() -> dict[str, tuple[str, ModelSpec]]:
    """Lower-cased name or alias -> (preset name, model), built once from models.toml."""
    resource = resources.files("simulator.workload").joinpath("presets", "models.toml")
    root = parse_toml(resource.read_text(encoding="utf-8"), _PRESETS_DISPLAY)
    index: dict[str, tuple[str, ModelSpec]] = {}
    for name in root.keys():
        model, aliases = _build(root.take_table(name), name)
        for key in (name, *aliases):
            if key.lower() in index:
                raise root.error(f"name or alias '{key}' is used twice")
            index[key.lower()] = (name, model)
    return index


def _build(table: Table, name: str) -> tuple[ModelSpec, list[str]]:
    """Read and check one model table; returns the model and its aliases.

    Raises:
        InputError: unknown or missing key, wrong type, value out of range, or ``num_heads``
            not dividing ``hidden_size``.
    """
    aliases = table.take_strings("aliases") if table.has("aliases") else []
    if not table.take_string("source").strip():
        raise table.error("key 'source' must cite where the shapes come from, got ''")
    architecture = cast(Architecture, table.take_string("architecture", _ARCHITECTURES))
    transformer = architecture != "resnet50"
    zero_ok = () if transformer else _TRANSFORMER_ONLY
    counts = {key: int(table.take_number(key, integer=True, inclusive=key in zero_ok, maximum=MAX_COUNTS[key]))
              for key in _COUNTS}
    has_image = table.has("image_size")
    image_size = int(table.take_number("image_size", integer=True, inclusive=transformer,
                                       maximum=MAX_COUNTS["image_size"])) if has_image else 0
    if transformer and image_size:
        raise table.error(f"key 'image_size' is for resnet50 only, got {image_size} for {architecture!r}")
    if not transformer and not image_size:
        raise table.error("missing key 'image_size' (required for resnet50)")
    if transformer and counts["hidden_size"] % counts["num_heads"]:
        hidden, heads = counts["hidden_size"], counts["num_heads"]
        raise table.error(f"key 'num_heads' must divide hidden_size {hidden}, got {heads}")
    kv_heads = int(table.take_number("num_kv_heads", integer=True, maximum=MAX_COUNTS["num_kv_heads"])) \
        if table.has("num_kv_heads") else 0
    if kv_heads and (not transformer or counts["num_heads"] % kv_heads):
        raise table.error(f"key 'num_kv_heads' must divide num_heads {counts['num_heads']} of a transformer,"
                          f" got {kv_heads}")
    classes = int(table.take_number("num_classes", integer=True, maximum=MAX_COUNTS["num_classes"])) \
        if table.has("num_classes") else 0
    if classes and not transformer:
        raise table.error(f"key 'num_classes' is for a transformer's classification head, got {classes} for resnet50"
                          " (its classes are vocab_size)")
    extra = _optional_counts(table)
    imbalance = float(table.take_number("expert_load_imbalance", minimum=1.0, inclusive=True, maximum=MAX_IMBALANCE)) \
        if table.has("expert_load_imbalance") else 1.0
    table.finish()
    model = ModelSpec(name=name, architecture=architecture, image_size=image_size, num_kv_heads=kv_heads,
                      expert_load_imbalance=imbalance, num_classes=classes, **counts, **extra)
    _check_experts(model, table)
    _check_window(model, table)
    return model, aliases


MAX_IMBALANCE = 1000.0
"""Largest ``expert_load_imbalance``: the busiest of 256 experts taking every token is 256."""

_OPTIONAL_COUNTS = ("head_dim", "num_experts", "experts_per_token", "expert_ffn_hidden_size", "num_shared_experts",
                    "shared_expert_ffn_hidden_size", "first_dense_layers", "moe_layer_period", "q_lora_rank",
                    "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "sliding_window",
                    "sliding_window_pattern")
_EXPERT_KEYS = _OPTIONAL_COUNTS[2:8]
_LATENT_KEYS = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def _optional_counts(table: Table) -> dict[str, int]:
    """The optional counts the table gives (head size, experts, latent attention)."""
    return {key: int(table.take_number(key, integer=True, inclusive=key != "moe_layer_period",
                                       maximum=MAX_COUNTS[key]))
            for key in _OPTIONAL_COUNTS if table.has(key)}


def table_gave(key: str, model: ModelSpec) -> bool:
    """True if ``model``'s ``key`` is not the :class:`ModelSpec` default (the file gave it)."""
    return bool(getattr(model, key) != ModelSpec.__dataclass_fields__[key].default)


def _check_window(model: ModelSpec, table: Table) -> None:
    """Sliding-window keys belong to a causal transformer, the pattern to a window.

    Raises:
        InputError: naming the table and key.
    """
    if model.sliding_window and not model.is_causal:
        raise table.error(f"key 'sliding_window' needs a causal architecture ('gpt' or 'llama'), got"
                          f" {model.architecture!r}")
    if model.sliding_window_pattern and not model.sliding_window:
        raise table.error("key 'sliding_window_pattern' needs sliding_window > 0")
    if model.sliding_window and model.uses_latent_attention:
        raise table.error("key 'sliding_window' is not modelled with kv_lora_rank (latent attention)")


def _check_experts(model: ModelSpec, table: Table) -> None:
    """A Mixture-of-Experts model names its experts, top-k and expert size and is a ``llama``
    (SwiGLU experts); expert keys need ``num_experts``; latent attention names its head sizes.

    Raises:
        InputError: naming the table and key.
    """
    if not model.is_moe:
        given = [key for key in _EXPERT_KEYS if table_gave(key, model)]
        if given or model.expert_load_imbalance != 1.0:
            raise table.error(f"key '{given[0] if given else 'expert_load_imbalance'}' needs num_experts > 0")
    else:
        if model.architecture != "llama":
            raise table.error(f"key 'num_experts' needs architecture 'llama' (SwiGLU experts), got"
                              f" {model.architecture!r}")
        for key in ("experts_per_token", "expert_ffn_hidden_size"):
            if not getattr(model, key):
                raise table.error(f"missing key '{key}' (required with num_experts)")
        if model.experts_per_token > model.num_experts:
            raise table.error(f"key 'experts_per_token' must be at most num_experts {model.num_experts}, got"
                              f" {model.experts_per_token}")
        if model.first_dense_layers >= model.num_layers:
            raise table.error(f"key 'first_dense_layers' must be below num_layers {model.num_layers}, got"
                              f" {model.first_dense_layers}")
    if model.uses_latent_attention:
        missing = [key for key in _LATENT_KEYS if not getattr(model, key)]
        if missing:
            raise table.error(f"missing key '{missing[0]}' (required with kv_lora_rank)")
        if model.head_dim:
            raise table.error("key 'head_dim' is not used with kv_lora_rank (give qk_nope_head_dim, qk_rope_head_dim)")
    elif model.q_lora_rank or any(getattr(model, key) for key in _LATENT_KEYS):
        raise table.error("key 'q_lora_rank', 'qk_nope_head_dim', 'qk_rope_head_dim' or 'v_head_dim' needs"
                          " kv_lora_rank > 0")
