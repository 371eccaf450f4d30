"""``palm-search hardware new``: a valid hardware file to edit, from a preset or a file."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from simulator import InputError, hardware_from_tables, hardware_tables, hardware_to_toml, load_hardware

Opt = typer.Option

hardware_app = typer.Typer(no_args_is_help=True, help="Hardware files: start your own from a preset.")


def _grid(flag: str, text: str) -> tuple[int, int]:
    """``"2x3"`` -> ``(2, 3)``.

    Raises:
        InputError: not two positive integers joined by ``x``.
    """
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise InputError(f"{flag}: expected two positive integers as AxB (e.g. 2x2), got {text!r}")
    return int(parts[0]), int(parts[1])


def new_hardware(
    start: Annotated[str, Opt("--from", help="Preset (e.g. wafer, h100-cluster) or hardware file to start from.")],
    dies: Annotated[str | None, Opt(help="Mesh: dies along x and y, e.g. 2x2.")] = None,
    cores: Annotated[str | None, Opt(help="Mesh: cores per die along x and y, e.g. 4x4.")] = None,
    nodes: Annotated[int | None, Opt(help="Cluster: nodes.")] = None,
) -> None:
    """Print a hardware file (TOML, SI keys, every number with its source) to edit: the machine of
    --from with the changes asked; a changed number's source says so, to be replaced by yours."""
    hardware = load_hardware(start)
    changes: dict[str, int] = {}
    for flag, value, kind, keys in (("--dies", dies, "mesh", ("dies_x", "dies_y")),
                                    ("--cores", cores, "mesh", ("cores_x", "cores_y"))):
        if value is not None:
            _require(hardware.kind, kind, flag)
            changes.update(zip(keys, _grid(flag, value), strict=True))
    if nodes is not None:
        _require(hardware.kind, "cluster", "--nodes")
        changes["nodes"] = nodes
    cited = {f"{hardware.kind}.{key}": f"palm-search hardware new --from {start}: changed to {value};"
             " replace with your chip's source" for key, value in changes.items()}
    edited = dataclasses.replace(hardware, network=dataclasses.replace(hardware.network, **changes),
                                 sources={**hardware.sources, **cited})
    hardware_from_tables(hardware_tables(edited), hardware.name, "the new file")  # the file's own checks
    typer.echo(hardware_to_toml(edited), nl=False)


def _require(kind: str, wanted: str, flag: str) -> None:
    if kind != wanted:
        raise InputError(f"{flag}: applies to a {wanted}, and this machine is a {kind}")
