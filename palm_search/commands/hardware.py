"""``palm-search hardware new``: a valid hardware file to edit, from a preset or a file."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from simulator import Hardware, InputError, hardware_from_tables, hardware_tables, hardware_to_toml, load_hardware
from simulator.network import cluster, mesh

Opt = typer.Option

hardware_app = typer.Typer(no_args_is_help=True, help="Hardware files: start your own from a preset.")


def new_hardware(
    start: Annotated[str, Opt("--from", help="Preset (e.g. wafer, h100-cluster) or hardware file to start from.")],
    dies: Annotated[str | None, Opt(help="Mesh: dies along x and y, e.g. 2x2.")] = None,
    cores: Annotated[str | None, Opt(help="Mesh: cores per die along x and y, e.g. 4x4.")] = None,
    nodes: Annotated[int | None, Opt(help="Cluster: nodes.")] = None,
) -> None:
    """Print a hardware file (TOML, SI keys, every number with its source) to edit: the machine of
    --from with the changes asked; a changed number's source says so, to be replaced by yours."""
    from spaces.hardware import grid_of  # spaces imports optuna: not at the command line's start-up

    hardware = load_hardware(start)
    changes: dict[str, int] = {}
    for flag, value, keys in (("--dies", dies, ("dies_x", "dies_y")), ("--cores", cores, ("cores_x", "cores_y"))):
        if value is not None:
            _require(hardware, mesh.Mesh, flag)
            changes.update(zip(keys, grid_of(flag, value), strict=True))
    if nodes is not None:
        _require(hardware, cluster.Cluster, "--nodes")
        changes["nodes"] = nodes
    cited = {f"{hardware.kind}.{key}": f"palm-search hardware new --from {start}: changed to {value};"
             " replace with your chip's source" for key, value in changes.items()}
    cited.update(_uncarried(hardware, changes, start))
    edited = dataclasses.replace(hardware, network=dataclasses.replace(hardware.network, **changes),
                                 sources={**hardware.sources, **cited})
    hardware_from_tables(hardware_tables(edited), hardware.name, "the new file")  # the file's own checks
    typer.echo(hardware_to_toml(edited), nl=False)


UNCARRIED_ACROSS_DIES = ("inter_die_link_bandwidth_",)
"""Mesh keys (up to their unit) a one-die machine never uses: a file that adds dies carries them
over unsourced."""


def _uncarried(hardware: Hardware, changes: dict[str, int], start: str) -> dict[str, str]:
    """Sources flagging the values ``start`` could not carry over: a one-die chip's die-to-die link
    (never used, so never measured) once ``--dies`` makes dies meet."""
    network = hardware.network
    if not isinstance(network, mesh.Mesh) or network.num_devices > network.devices_per_node:  # more than one die
        return {}
    if changes.get("dies_x", 1) * changes.get("dies_y", 1) == 1:
        return {}
    return {key: f"palm-search hardware new --from {start}: {start} has one die, so this link was never used"
            " there (its value is the on-chip link's, carried over): replace with your die-to-die (chip-to-chip)"
            " link's, with its source" for key in hardware.sources
            if any(key.startswith(f"mesh.{stem}") for stem in UNCARRIED_ACROSS_DIES)}


def _require(hardware: Hardware, wanted: type[mesh.Mesh | cluster.Cluster], flag: str) -> None:
    """Raises: InputError: ``hardware``'s network is not a ``wanted`` record (``flag`` needs one)."""
    if not isinstance(hardware.network, wanted):
        raise InputError(f"{flag}: applies to a {wanted.kind}, and this machine is a {hardware.kind}")


def hardware_cost(
    hw: Annotated[str | None, Opt("--hw", help="A mesh preset or hardware file to cost (default: none).")] = None,
    technology: Annotated[str, Opt(help="Technology file: a name under simulator/hardware/technology or a path.")]
    = "tsmc-n7",
) -> None:
    """Print the technology's check against real chips (published die area and TDP), and with
    --hw a mesh chip's silicon area and full-activity power, part by part."""
    from simulator.hardware import check_rows, hardware_cost, load_technology

    tech = load_technology(technology)
    cost = hardware_cost(load_hardware(hw), tech) if hw is not None else None
    typer.echo(f"{tech.name}: model against published chips (area mm^2, power W; * = a coefficient came from it)")
    for row in check_rows(tech):
        mark = "" if row.independent_area else " *"
        typer.echo(f"  {row.name}{mark}: area {row.predicted_area_m2 * 1e6:,.0f} vs {row.published_area_m2 * 1e6:,.0f}"
                   f" ({row.area_error:+.0%}), power {row.predicted_power_W:,.0f} vs {row.published_tdp_W:,.0f}"
                   f" ({row.power_error:+.0%})")
    if cost is None:
        return
    typer.echo(f"{hw}: {cost.area_m2 * 1e6:,.0f} mm^2, {cost.power_W:,.0f} W at full activity")
    typer.echo("  area mm^2: " + ", ".join(f"{k} {v * 1e6:,.0f}" for k, v in cost.area_parts_m2.items()))
    typer.echo("  power W: " + ", ".join(f"{k} {v:,.0f}" for k, v in cost.power_parts_W.items()))
