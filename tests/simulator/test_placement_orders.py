"""Named device orders of every machine kind: permutations of the devices, the geometry each promises."""

from __future__ import annotations

from dataclasses import replace

import pytest

import simulator
from simulator.network.topology import topology_of
from simulator.strategy import PLACEMENTS

WAFER = simulator.load_hardware("wafer")


def small_mesh(dies=(3, 2), cores=(2, 3)):
    """The wafer preset shrunk to ``dies`` of ``cores`` (odd sizes on purpose)."""
    network = replace(WAFER.network, dies_x=dies[0], dies_y=dies[1], cores_x=cores[0], cores_y=cores[1])
    return replace(WAFER, name="small-mesh", network=network)


MACHINES = [WAFER, simulator.load_hardware("grayskull"), small_mesh(), small_mesh((1, 3), (4, 1)),
            simulator.load_hardware("a100-cluster")]


@pytest.mark.parametrize("hardware", MACHINES, ids=lambda h: h.name + str(h.num_devices))
def test_orders_are_permutations_and_named_as_strategies_name_them(hardware):
    orders = topology_of(hardware).device_orders()
    assert "line" in orders and set(orders) <= set(PLACEMENTS) - {"explicit"}
    for order in orders.values():
        assert sorted(order) == list(range(hardware.num_devices))


def test_every_placement_name_is_offered_by_some_kind():
    offered = {name for h in MACHINES for name in topology_of(h).device_orders()}
    assert offered | {"explicit"} == set(PLACEMENTS)


def test_a_machine_without_the_order_is_an_input_error():
    cluster = simulator.load_hardware("a100-cluster")
    model = simulator.load_model("T-18B")
    with pytest.raises(simulator.InputError, match="placement 'hilbert' is not offered"):
        simulator.simulate(model, cluster, simulator.Strategy(tp=8, dp=256, placement="hilbert"))


def test_wafer_family_and_its_geometry():
    topology = topology_of(WAFER)
    orders = topology.device_orders()
    assert list(orders) == ["line", "s-shape", "s-shape-transposed", "s-shape-east", "s-shape-south",
                            "s-shape-rotated", "row-snake", "column-snake", "hilbert"]
    width, height = WAFER.network.width, WAFER.network.height
    assert topology.coord(orders["s-shape-east"][0]).x == width - 1
    assert topology.coord(orders["s-shape-south"][0]).y == height - 1
    first_column = [topology.coord(d) for d in orders["s-shape-transposed"][:WAFER.network.cores_y]]
    assert [(c.x, c.y) for c in first_column] == [(0, y) for y in range(WAFER.network.cores_y)]
    for name in ("column-snake", "row-snake", "hilbert"):
        steps = [abs(topology.coord(a).x - topology.coord(b).x) + abs(topology.coord(a).y - topology.coord(b).y)
                 for a, b in zip(orders[name], orders[name][1:], strict=False)]
        assert max(steps) == 1, name  # even-sided mesh: every step is one hop
