"""Load a :class:`~simulator.strategy.Strategy` from a TOML or JSON file.

* TOML: one table ``[strategy]`` whose keys are the fields of :class:`Strategy` (a field left out
  takes its default; TOML has no null, so leave ``global_batch_size`` out for "the model's").
* JSON: either the ``Strategy.to_dict()`` object itself, or a document with a top-level
  ``"strategy"`` object (as a search run's ``best.json``), whose other keys are ignored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simulator.config import read_text_file, read_toml
from simulator.errors import InputError
from simulator.hardware.loader import hardware_from_tables
from simulator.hardware.spec import Hardware
from simulator.strategy import Strategy


def load_strategy(path: str | Path) -> Strategy:
    """Read a strategy file; the format follows the suffix (``.json``, else TOML).

    Raises:
        InputError: unreadable or invalid file, unknown key, or a field out of its domain;
            the message starts with the file name.
    """
    name = str(path)
    data = _read_json(path) if name.endswith(".json") else _read_toml_strategy(path)
    try:
        return Strategy.from_dict(data)
    except InputError as error:
        raise InputError(f"{name}: {error}") from None


def _read_toml_strategy(path: str | Path) -> dict[str, Any]:
    root = read_toml(path)
    table = root.take_table("strategy")
    root.finish()
    return table.data


def read_json_document(path: str | Path) -> Any:
    """The parsed JSON of a strategy file or a run's ``best.json``.

    Raises:
        InputError: unreadable file or invalid JSON (the message starts with the file name).
    """
    name = str(path)
    try:
        return json.loads(read_text_file(path))
    except (json.JSONDecodeError, RecursionError) as error:
        raise InputError(f"{name}: invalid JSON: {error}") from None


def _read_json(path: str | Path) -> dict[str, Any]:
    """The strategy object of a JSON file (the document, or its ``"strategy"`` member).

    Raises:
        InputError: unreadable file, invalid JSON, or no JSON object where the strategy should be.
    """
    name = str(path)
    document = read_json_document(path)
    if isinstance(document, dict) and "strategy" in document:
        document = document["strategy"]
    if not isinstance(document, dict):
        kind = type(document).__name__
        raise InputError(f"{name}: expected a JSON object with the strategy fields, got {kind}")
    return document


def read_best(path: str | Path) -> tuple[str | None, Hardware | None]:
    """The model name and machine a ``best.json`` (or any JSON strategy document) names; None
    for what it does not name (a plain strategy file names neither).

    Raises:
        InputError: unreadable JSON, or a ``machine`` that is not a valid hardware description.
    """
    if not str(path).endswith(".json"):
        return None, None
    document = read_json_document(path)
    if not isinstance(document, dict):
        return None, None
    machine = document.get("machine")
    hardware = (hardware_from_tables(machine, str(document.get("hardware", "machine")), f"{path}: machine")
                if isinstance(machine, dict) else None)
    model = document.get("model")
    return (model if isinstance(model, str) else None), hardware
