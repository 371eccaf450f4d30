"""Load a :class:`~simulator.stacks.spec.Stack` from a bundled preset or a TOML file.

A stack file has one table, ``[stack]``; each key it gives replaces Megatron-Core's default and
cites its source in a ``<key>_source`` sibling (a microbenchmark or the stack's documented
behaviour, never a fit to a validation row)::

    [stack]
    zero3_gather = "parameter"
    zero3_gather_source = "DeepSpeed v0.3.16 partition_parameters.py: one all_gather per parameter"
    collective_call_overhead_us = 500
    collective_call_overhead_us_source = "DeepSpeed issue #1069: about 0.5 ms per all_gather call"

Keys: ``overlap_data_parallel`` and ``reshard_after_forward`` ... as :class:`Stack`'s
attributes; ``collective_call_overhead`` and ``zero3_gather_rank_overhead`` carry a time unit
(``_us`` or ``_s``). A serving stack's keys (:class:`~simulator.stacks.spec.Serving`, inference
only) are ``kv_cache_format``, ``small_m_gemm_tiles`` (``[[largest rows, tile rows, tile columns], ...]``), ``sampling``
(``device`` or ``host``) with ``host_read_bandwidth_GB_per_s`` and ``host_step_overhead_us``
(or ``_s``), ``decode_key_chunk`` (keys per chunk of a decode step's attention),
``decode_data_movement_ops`` (kernels a decode layer launches beyond its arithmetic),
``decode_gemm_readers_per_dram_port`` (a decode step's GEMMs DRAM-sharded), ``prefill_gemm_grid_x``
and ``_y`` (the core grid a prefill's GEMMs run on), and two sub-tables
of operator classes, each value with its own source::

    [stack.weight_formats]
    mlp_in = "bfloat4_b"
    mlp_in_source = "tt-metal model_config.py: TensorGroup.FF1_FF3: PrecisionSetting.BFP4"

    [stack.math_fidelities]
    mlp_in = "LoFi"
    mlp_in_source = "..."

A training stack may give ``zero3_reduction_format`` (the precision ZeRO-3 reduces gradients
in), ``selective_recompute`` (``attention_core`` or ``alternate_matmuls``) and a table of the HBM
bytes one forward of each element-wise class moves per element, each with its source::

    [stack.elementwise_bytes_per_element]
    norm = 36
    norm_source = "torchtitan models/norms.py RMSNorm L96-101 @9dec370, eager: six kernels"

(classes ``norm``, ``final_norm``, ``swiglu``, ``residual``, ``rope``, ``cross_entropy``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from simulator.config import Table, parse_toml, read_toml
from simulator.errors import InputError
from simulator.stacks.spec import (
    ELEMENTWISE_CLASSES,
    FIDELITY_CLASSES,
    GATHERS,
    REDUCTIONS,
    RESHARDS,
    SAMPLINGS,
    SELECTIVE_POLICIES,
    WEIGHT_CLASSES,
    Serving,
    Stack,
)
from simulator.strategy import FORMAT_BYTES, MATH_FIDELITIES

_PRESET_DISPLAY = "simulator/stacks/presets/{}.toml"
_CHOICES: dict[str, tuple[str, ...]] = {"reshard_after_forward": RESHARDS, "zero3_gather": GATHERS,
                                        "zero3_gradient_reduction": REDUCTIONS, "sampling": SAMPLINGS,
                                        "selective_recompute": SELECTIVE_POLICIES}
_FLAGS = ("overlap_data_parallel",)
_OVERHEAD_KEYS = ("collective_call_overhead_us", "collective_call_overhead_s", "zero3_gather_rank_overhead_us",
                  "zero3_gather_rank_overhead_s")
_THRESHOLD = "zero3_persistence_threshold"
_CLASS_TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "weight_formats": (WEIGHT_CLASSES, tuple(FORMAT_BYTES)), "math_fidelities": (FIDELITY_CLASSES, MATH_FIDELITIES)}
_KV, _TILES, _REDUCTION = "kv_cache_format", "small_m_gemm_tiles", "zero3_reduction_format"
_HOST_KEYS = ("host_read_bandwidth_GB_per_s", "host_step_overhead_us", "host_step_overhead_s")
_COUNTS = ("decode_key_chunk", "decode_data_movement_ops", "decode_gemm_readers_per_dram_port", "prefill_gemm_grid_x",
           "prefill_gemm_grid_y")
_SERVING_FIELDS = (_KV, _TILES, *_COUNTS, "sampling", "host_read_bandwidth_bytes_per_s", "host_step_overhead_s")
_ELEMENTWISE = "elementwise_bytes_per_element"
KNOWN_KEYS = (*_FLAGS, *_CHOICES, _THRESHOLD, *_OVERHEAD_KEYS, _KV, _TILES, *_COUNTS, *_HOST_KEYS,
              *_CLASS_TABLES, _ELEMENTWISE, _REDUCTION)
"""The keys a ``[stack]`` table may give (each with its ``_source``, or a table of classes)."""


def stack_presets() -> list[str]:
    """Names of the bundled stack presets, sorted (``["deepspeed-0.3-zero3", ...]``)."""
    folder = resources.files("simulator.stacks").joinpath("presets")
    return sorted(p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml"))


def load_stack(name_or_path: str | Path) -> Stack:
    """A preset by name (``"megatron-core"``) or a TOML file by path (anything with ``/`` or
    ending in ``.toml``), as :func:`simulator.load_hardware` reads them.

    Raises:
        InputError: unknown preset (listing the presets), unreadable file, missing ``[stack]``,
            unknown key, missing ``_source``, or a value of the wrong type or out of range.
    """
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or "/" in text or text.endswith(".toml"):
        return _build(read_toml(name_or_path), Path(text).stem)
    if text not in stack_presets():
        raise InputError(f"stack: unknown preset {text!r} (presets: {stack_presets()})")
    resource = resources.files("simulator.stacks").joinpath("presets", f"{text}.toml")
    return _build(parse_toml(resource.read_text(encoding="utf-8"), _PRESET_DISPLAY.format(text)), text)


def _build(root: Table, name: str) -> Stack:
    table = root.take_table("stack")
    root.finish(("stack",))
    values: dict[str, Any] = {}
    serving: dict[str, Any] = {}
    sources: list[tuple[str, str]] = []
    for key in [k for k in table.keys() if k in KNOWN_KEYS]:
        if key in _CLASS_TABLES:
            serving[key], cited = _classes(table.take_table(key), *_CLASS_TABLES[key])
            sources += [(f"{key}.{c}", source) for c, source in cited]
            continue
        if key == _ELEMENTWISE:
            values[key], cited = _traffic(table.take_table(key))
            sources += [(f"{key}.{c}", source) for c, source in cited]
            continue
        field, value = _value(table, key)
        (serving if field in _SERVING_FIELDS else values)[field] = value
        sources.append((field, table.take_source(key)))
    table.finish(KNOWN_KEYS)
    try:
        served = Serving(**serving)
    except InputError as error:
        raise table.error(str(error).removeprefix("stack: ")) from None
    return Stack(name=name, sources=tuple(sources), serving=served, **values)


def _classes(table: Table, classes: tuple[str, ...], choices: tuple[str, ...]) -> tuple[
        tuple[tuple[str, str], ...], list[tuple[str, str]]]:
    """``((class, value), ...)`` of a class table and the source of each."""
    given = tuple((c, table.take_string(c, choices)) for c in table.keys() if c in classes)
    cited = [(c, table.take_source(c)) for c, _ in given]
    table.finish(classes)
    return given, cited


def _traffic(table: Table) -> tuple[tuple[tuple[str, float], ...], list[tuple[str, str]]]:
    """``((class, bytes per element), ...)`` of ``[stack.elementwise_bytes_per_element]`` and the
    source of each: positive numbers of :data:`~simulator.stacks.spec.ELEMENTWISE_CLASSES`."""
    given = tuple((c, float(table.take_number(c))) for c in table.keys() if c in ELEMENTWISE_CLASSES)
    cited = [(c, table.take_source(c)) for c, _ in given]
    table.finish(ELEMENTWISE_CLASSES)
    return given, cited


def _tiles(table: Table) -> tuple[tuple[int, int, int], ...]:
    """``small_m_gemm_tiles``: triples of positive integers, increasing in their first."""
    value = table.take_triples(_TILES)
    if any(a[0] >= b[0] for a, b in zip(value, value[1:], strict=False)):
        raise table.error(f"key '{_TILES}' must list increasing row bounds, got {[list(v) for v in value]}")
    return value


def _value(table: Table, key: str) -> tuple[str, Any]:
    """(the :class:`Stack` attribute, its value in SI) of the file's ``key``."""
    if key in _CHOICES:
        return key, table.take_string(key, _CHOICES[key])
    if key in _FLAGS:
        return key, table.take_flag(key)
    if key == _THRESHOLD:
        return key, float(table.take_number(key, inclusive=True))
    if key in (_KV, _REDUCTION):
        return key, table.take_string(key, tuple(FORMAT_BYTES))
    if key == _TILES:
        return key, _tiles(table)
    if key in _COUNTS:
        return key, int(table.take_quantity(key, integer=True)[1])
    return table.take_quantity(key)
