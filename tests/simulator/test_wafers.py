"""Machines of several wafers: the inter-wafer link tier of the mesh, its routes, placements kept
within a wafer or spanning wafers, and their legality (issue 37, item 2)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from fixtures import mesh_hardware

from simulator import load_hardware, simulate
from simulator.errors import InputError
from simulator.legality import check_plan, wafer_straddle
from simulator.network.backends import ContentionNetwork
from simulator.network.collectives import make_flow, ring_edges
from simulator.network.mesh import Mesh
from simulator.network.topology import topology_of
from simulator.placement import place, stage_devices
from simulator.strategy import Strategy
from simulator.workload.loader import load_model

WAFER_BW, WAFER_LATENCY = 10e9, 1e-6


def wafers_hardware(*, wafers=(2, 1), dies=(1, 1), cores=(2, 2), links_per_die=1, hop=1e-9):
    """A small ideal mesh of ``wafers`` wafers of ``dies`` dies of ``cores`` cores."""
    hw = mesh_hardware(dies=dies, cores=cores, hop=hop)
    network = dataclasses.replace(hw.network, wafers_x=wafers[0], wafers_y=wafers[1],
                                  inter_wafer_link_bandwidth_bytes_per_s=WAFER_BW,
                                  inter_wafer_hop_latency_s=WAFER_LATENCY, inter_wafer_links_per_die=links_per_die)
    return dataclasses.replace(hw, network=network)


def wafer_links(topo):
    """Every link between two wafers."""
    return {r for (a, b), r in topo._links.items() if topo.wafer_of(a) != topo.wafer_of(b)}


def test_a_p2p_over_the_wafer_link_costs_bytes_over_its_bandwidth_plus_its_latency():
    topo = topology_of(wafers_hardware())
    src, dst = topo.device_at(1, 1), topo.device_at(2, 1)  # the one link (die edge's middle core, row 1)
    flow = make_flow(topo, "p2p", "p2p", [(src, dst)], efficiency=1.0)
    assert flow.step_time_s(1e6) == pytest.approx(1e6 / WAFER_BW + WAFER_LATENCY, rel=1e-12)


def test_a_p2p_between_wafers_walks_to_the_link_and_on_from_its_far_end():
    """(0, 0) -> (2, 0) over two wafers of 2 x 2 cores joined at row 1: XY to (1, 1), the link,
    then (2, 1) -> (2, 0): three mesh hops and one wafer hop; the wafer link is the narrowest."""
    topo = topology_of(wafers_hardware(hop=2e-9))
    links, latency = topo.route(topo.device_at(0, 0), topo.device_at(2, 0))
    assert [topo.names[r] for r in links] == ["link 0->1", "link 1->5", "link 5->6", "link 6->2"]
    assert latency == pytest.approx(3 * 2e-9 + WAFER_LATENCY, rel=1e-12)
    flow = make_flow(topo, "p2p", "p2p", [(0, 2)], efficiency=1.0)
    assert flow.step_time_s(1e6) == pytest.approx(1e6 / WAFER_BW + latency, rel=1e-12)


def test_two_flows_over_one_wafer_link_take_twice_as_long_as_one():
    topo = topology_of(wafers_hardware())
    first = make_flow(topo, "a", "p2p", [(topo.device_at(1, 1), topo.device_at(2, 1))], 1.0)
    second = make_flow(topo, "b", "p2p", [(topo.device_at(0, 0), topo.device_at(3, 0))], 1.0)
    shared = set(first.loads) & set(second.loads)
    assert shared & wafer_links(topo)
    first.booked = second.booked = tuple(shared)
    duration = max(first.step_time_s(1e6), second.step_time_s(1e6))
    net = ContentionNetwork()
    ends = [net.book(f, 0.0, duration, 0.0) + duration for f in (first, second)]
    assert max(ends) == pytest.approx(2 * duration)


@pytest.mark.parametrize("wafers", [(2, 1), (1, 2), (2, 2), (3, 2)])
@pytest.mark.parametrize("links_per_die", [1, 2, None])
def test_every_route_is_a_chain_of_links_from_source_to_destination(wafers, links_per_die):
    hw = wafers_hardware(wafers=wafers, dies=(2, 1), cores=(2, 3) if links_per_die != 2 else (2, 2),
                         links_per_die=links_per_die)
    topo = topology_of(hw)
    ends = {r: pair for pair, r in topo._links.items()}
    for src, dst in itertools.product(range(topo.num_devices), repeat=2):
        links, latency = topo.route(src, dst)
        path = [ends[r] for r in links]
        assert [a for a, _ in path[:1]] == ([src] if src != dst else [])
        assert all(b == a for (_, b), (a, _) in zip(path, path[1:], strict=False))
        assert [b for _, b in path[-1:]] == ([dst] if src != dst else [])
        crossings = sum(topo.wafer_of(a) != topo.wafer_of(b) for a, b in path)
        (sx, sy), (dx, dy) = (divmod(topo.wafer_of(d), wafers[0])[::-1] for d in (src, dst))
        assert crossings == abs(sx - dx) + abs(sy - dy)  # one link per wafer boundary crossed
        assert latency == pytest.approx((len(path) - crossings) * 1e-9 + crossings * WAFER_LATENCY, rel=1e-12)


def test_a_route_on_one_wafer_goes_x_then_y_and_prices_each_die_boundary_it_crosses():
    """On the PALM wafer (5 x 4 dies of 4 x 4 cores) with die-boundary hops 100x a NoC hop: every
    route is the Manhattan path, along the row first, and its latency counts the die boundaries."""
    base = load_hardware("wafer")
    hw = dataclasses.replace(base, network=dataclasses.replace(base.network, inter_die_hop_latency_s=1e-7))
    topo, mesh = topology_of(hw), hw.network
    ends = {r: pair for pair, r in topo._links.items()}
    for src, dst in itertools.product(range(0, topo.num_devices, 7), range(0, topo.num_devices, 5)):
        links, latency = topo.route(src, dst)
        (sx, sy), (dx, dy) = ((topo.coord(d).x, topo.coord(d).y) for d in (src, dst))
        steps = [(topo.coord(b).x - topo.coord(a).x, topo.coord(b).y - topo.coord(a).y)
                 for a, b in map(ends.__getitem__, links)]
        horizontal = [step for step in steps if step[1] == 0]
        assert steps == horizontal + [step for step in steps if step[0] == 0]
        assert len(horizontal) == abs(sx - dx) and len(steps) == abs(sx - dx) + abs(sy - dy)
        crossed = abs(sx // mesh.cores_x - dx // mesh.cores_x) + abs(sy // mesh.cores_y - dy // mesh.cores_y)
        assert latency == pytest.approx((len(steps) - crossed) * mesh.hop_latency_s + crossed * 1e-7, rel=1e-12)


@pytest.mark.parametrize("wafers", [(3, 1), (1, 3)])
def test_with_a_link_on_every_edge_core_a_row_or_column_of_wafers_routes_as_one_grid(wafers):
    """With every edge core linked, wafers in a row (column) route XY as one wafer of their size."""
    many = topology_of(wafers_hardware(wafers=wafers, dies=(2, 1), cores=(2, 2), links_per_die=None))
    one = topology_of(mesh_hardware(dies=(2 * wafers[0], wafers[1]), cores=(2, 2)))
    for src, dst in itertools.product(range(many.num_devices), repeat=2):
        assert [many.names[r] for r in many.route(src, dst)[0]] == [one.names[r] for r in one.route(src, dst)[0]]


def test_one_wafer_is_the_mesh_without_the_tier():
    """Inter-wafer figures on a machine of one wafer change no resource, route, order or stage."""
    plain = load_hardware("wafer")
    tiered = dataclasses.replace(plain, network=dataclasses.replace(
        plain.network, inter_wafer_link_bandwidth_bytes_per_s=1e9, inter_wafer_hop_latency_s=1e-6,
        inter_wafer_links_per_die=1))
    a, b = topology_of(plain), topology_of(tiered)
    assert list(a.names) == list(b.names) and list(a.bandwidth_bytes_per_s) == list(b.bandwidth_bytes_per_s)
    assert all(a.route(s, d) == b.route(s, d) for s in range(0, 320, 7) for d in range(0, 320, 11))
    assert b.wafer_device_orders() == a.device_orders() == b.device_orders()
    for placement in a.device_orders():
        span = Strategy(tp=16, pp=5, dp=4, placement=placement)
        assert stage_devices(b, span) == stage_devices(b, span.with_fields(wafer_stages="within"))


def test_a_stage_kept_within_a_wafer_uses_no_inter_wafer_link_for_its_collectives():
    """wafer-4 (4 wafers of 320 cores), stages of 160 cores: ``within`` puts each on one wafer,
    ``span`` (the s-shape over all wafers' dies) lays stages across wafer boundaries."""
    hw = load_hardware("wafer-4")
    topo, crossing = topology_of(hw), wafer_links(topology_of(hw))
    def wafer_loads(strategy):
        return [bool(set(make_flow(topo, "tp", "tp", ring_edges(groups), 1.0, len(groups[0])).loads) & crossing)
                for stage in place(topo, strategy) for groups in (stage.tp_groups, stage.dp_groups)]
    within = Strategy(tp=16, pp=8, dp=10, wafer_stages="within")
    assert not any(wafer_loads(within))
    assert all(len({topo.wafer_of(d) for d in stage}) == 1 for stage in stage_devices(topo, within))
    assert any(wafer_loads(within.with_fields(wafer_stages="span")))


def test_wafer_orders_are_each_wafers_order_in_turn():
    hw = load_hardware("wafer-4")
    topo, one = topology_of(hw), topology_of(load_hardware("wafer"))
    for name, order in topo.wafer_device_orders().items():
        for w in range(4):
            part = order[w * 320:(w + 1) * 320]
            assert {topo.wafer_of(d) for d in part} == {w}
            assert [(topo.coord(d).x % 20, topo.coord(d).y) for d in part] == \
                [(one.coord(d).x, one.coord(d).y) for d in one.device_orders()[name]]


@pytest.mark.parametrize(("per_stage", "pp", "straddle"), [(320, 4, None), (160, 8, None), (64, 20, None),
                                                            (96, 10, 3), (640, 2, 0), (300, 2, 1)])
def test_wafer_straddle_names_the_first_stage_across_a_boundary(per_stage, pp, straddle):
    assert wafer_straddle(load_hardware("wafer-4"), per_stage, pp) == straddle


def test_stages_within_wafers_that_would_cross_one_are_a_one_line_error():
    hw, model = load_hardware("wafer-4"), load_model("T-145B")
    with pytest.raises(InputError, match=r"^strategy: `wafer_stages` 'within': stage 3 of 96 devices would cross"
                                         r" a wafer boundary \(a wafer has 320\)$"):
        check_plan(model, hw, Strategy(tp=16, pp=10, dp=6, wafer_stages="within"))
    check_plan(model, hw, Strategy(tp=16, pp=10, dp=6))  # spanning wafers is legal


@pytest.mark.parametrize(("fields", "message"), [
    ({"wafers_x": 0}, r"`wafers_x` and `wafers_y` must be >= 1, got 0 x 1"),
    ({"wafers_x": 2}, r"2 x 1 wafers need `inter_wafer_link_bandwidth_GB_per_s` and `inter_wafer_hop_latency_ns`"),
    ({"wafers_x": 2, "inter_wafer_link_bandwidth_bytes_per_s": 1e9, "inter_wafer_hop_latency_s": 1e-6,
      "inter_wafer_links_per_die": 3},
     r"`inter_wafer_links_per_die` must be in 1..2 \(the cores of a die's edge\), got 3"),
])
def test_bad_wafer_tiers_are_one_line_errors(fields, message):
    base = mesh_hardware(dies=(1, 1), cores=(2, 2)).network
    assert isinstance(base, Mesh)
    with pytest.raises(InputError, match=message):
        dataclasses.replace(base, **fields)


def test_explicit_stages_are_not_cut_within_wafers():
    with pytest.raises(InputError, match="`wafer_stages` 'within' cuts stages from a named order"):
        Strategy(placement="explicit", stage_devices=((0,),), wafer_stages="within")


def test_the_wafer_4_preset_is_four_palm_wafers_with_sourced_links():
    four, one = load_hardware("wafer-4"), load_hardware("wafer")
    assert four.num_devices == 4 * one.num_devices and four.network.wafers == 4
    assert dataclasses.replace(four.network, wafers_x=1, inter_wafer_link_bandwidth_bytes_per_s=None,
                               inter_wafer_hop_latency_s=None, inter_wafer_links_per_die=None) == one.network
    assert four.network.inter_wafer_link_bandwidth_bytes_per_s == pytest.approx(1.2e12 / 8 / 2 / 4)
    for key in ("wafers_x", "inter_wafer_link_bandwidth_GB_per_s", "inter_wafer_links_per_die",
                "inter_wafer_hop_latency_ns"):
        assert four.sources[f"mesh.{key}"]
    assert topology_of(four).kind_counts()["link"] == 4 * topology_of(one).kind_counts()["link"] + 2 * 3 * 4


def test_a_file_may_start_from_wafer_4_which_starts_from_wafer(tmp_path):
    path = tmp_path / "tiled-4.toml"
    path.write_text('base = "wafer-4"\n[mesh]\ndataflow = "tiled"\ndataflow_source = "test"\n', encoding="utf-8")
    hw = load_hardware(path)
    assert hw.network.wafers == 4 and hw.memory.dram.dataflow == "tiled"
    assert hw.compute == load_hardware("wafer").compute


@pytest.mark.parametrize("placement", ["line", "s-shape", "hilbert"])
def test_wafers_joined_like_dies_simulate_as_one_wafer_of_their_dies(placement):
    """Two wafers of 2 x 2 dies, every edge core linked at the die links' bandwidth and the hop's
    latency, are one wafer of 4 x 2 dies: the same iteration, to the last bit."""
    one = mesh_hardware(dies=(4, 2), cores=(2, 2))
    two = wafers_hardware(wafers=(2, 1), dies=(2, 2), cores=(2, 2), links_per_die=None)
    two = dataclasses.replace(two, network=dataclasses.replace(
        two.network, inter_wafer_link_bandwidth_bytes_per_s=one.network.inter_die_link_bandwidth_bytes_per_s,
        inter_wafer_hop_latency_s=one.network.hop_latency_s))
    strategy = Strategy(tp=2, pp=4, dp=4, global_batch_size=16, placement=placement)
    model = load_model("T-1.7B")
    assert simulate(model, two, strategy).iteration_time_s == simulate(model, one, strategy).iteration_time_s
