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


P150X4 = simulator.load_hardware("blackhole-p150x4")
LLAMA_70B = simulator.load_model("Llama-3.1-70B")


def _decode(tp: int, pp: int = 1) -> simulator.Strategy:
    return simulator.Strategy(tp=tp, pp=pp, microbatch_size=32, global_batch_size=32, mode="inference",
                              precision="bfloat8_b", prompt_length=128, decode_context_length=129,
                              attention_split="users")


def test_the_four_chip_blackhole_box_is_a_ring_of_four_p150s():
    # docs.tenstorrent.com: four p150 cards as a ring of four (2 x 2 mesh), two QSFP-DD cables per pair,
    # each cable 2 x 400 GbE: 200 GB/s per direction over the 10 core pairs facing across a boundary
    network = P150X4.network
    assert (network.dies_x, network.dies_y, network.cores_x, network.cores_y) == (2, 2, 13, 10)
    assert P150X4.num_devices == 4 * 130 and network.die_collectives == "hierarchical"
    assert network.inter_die_link_bandwidth_bytes_per_s * network.cores_y == pytest.approx(200e9)
    single = simulator.load_hardware("blackhole-p150")
    assert P150X4.memory.dram.capacity_bytes == single.memory.dram.capacity_bytes  # per chip, as each p150


def test_a_mapping_short_of_the_whole_box_idles_the_same_cores_on_every_chip():
    # 512 of 4 x 130 cores: 128 on each chip, so its collectives stay two-level (within, then across chips)
    from simulator.placement import stage_devices
    topology = topology_of(P150X4)
    (devices,) = stage_devices(topology, _decode(512))
    per_chip = {chip: sum(topology.node_of(d) == chip for d in devices) for chip in range(4)}
    assert per_chip == dict.fromkeys(range(4), 128)
    assert topology.collective_levels((tuple(devices),)) is not None


def test_even_chips_keep_a_decode_step_off_the_flat_ring():
    # the same 512 cores one chip short (130, 130, 130, 122) would run one flat ring of 512 steps over
    # the chips' Ethernet hops; the even split's step is the faster, and within 1.3x of the 8-chip
    # Wormhole box's at the same mapping (4 x 512 GB/s of DRAM against 8 x 288)
    stack = simulator.load_stack("tt-transformers-performance")
    result = simulator.simulate(LLAMA_70B, P150X4, _decode(512), stack=stack)
    quietbox = simulator.simulate(LLAMA_70B, simulator.load_hardware("wormhole-quietbox"), _decode(512), stack=stack)
    assert result.iteration_time_s < 1.3 * quietbox.iteration_time_s


def test_a_flat_mesh_cuts_a_partial_mapping_from_the_front_of_its_order():
    from simulator.placement import stage_devices
    topology = topology_of(WAFER)
    strategy = simulator.Strategy(tp=4, pp=2, dp=1)
    stages = stage_devices(topology, strategy)
    assert [d for stage in stages for d in stage] == list(topology.device_orders()["s-shape"][:8])
