"""Pictures of one simulated mapping (matplotlib, no display needed): the pipeline timeline,
the placement of stages and TP groups on the machine, and link / DRAM-port utilisation.

Each ``plot_*`` function takes a :class:`simulator.trace.Timeline` and returns a matplotlib
``Figure`` sized for a paper (7.2 in wide, a two-column page's text width; 7-9 pt labels);
:func:`write_plots` saves all three in the formats asked (PNG for the dashboard; PNG, SVG and PDF
for ``simulate --plots``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PatchCollection
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from simulator import MEGATRON_CORE, Hardware, ModelSpec, PassKind, Stack, Strategy, simulate_timeline
from simulator.trace import Timeline, stage_slices, write_chrome_trace

K = TypeVar("K")

PASS_COLOURS: dict[PassKind | str, str] = {
    PassKind.FORWARD: "#4C72B0", PassKind.BACKWARD: "#DD8452", PassKind.BACKWARD_INPUT: "#E5AE38",
    PassKind.BACKWARD_WEIGHT: "#8172B3", PassKind.RECOMPUTE: "#55A868", PassKind.OPTIMIZER_UPDATE: "#C44E52",
    "bubble": "#E6E6E6"}
"""Colour of each pass kind on the timeline, and of idle time."""
PASS_LABELS: dict[PassKind | str, str] = {**{kind: kind.label for kind in PassKind}, "bubble": "bubble (idle)"}
NUMBERED = (PassKind.FORWARD, PassKind.BACKWARD, PassKind.BACKWARD_INPUT, PassKind.BACKWARD_WEIGHT, PassKind.RECOMPUTE)
"""Kinds whose slices show their microbatch number when wide enough."""
LEGEND = (PassKind.FORWARD, PassKind.BACKWARD, PassKind.RECOMPUTE, PassKind.OPTIMIZER_UPDATE, "bubble")
"""Entries the legend always shows; the backward's halves join it when a schedule runs them."""
HEAT = colormaps["YlOrRd"].with_extremes(bad="#D9D9D9")
"""Utilisation colours: pale yellow to dark red (not black: die borders are black)."""
WIDTH_IN = 7.2
"""Width of every picture (inches): a two-column page's text width."""
PAPER_FORMATS = ("png", "svg", "pdf")
PICTURES = ("timeline", "placement", "heatmap")
TIGHT_PAD_IN = 0.1
"""Margin around a picture's drawn content (inches; matplotlib's ``savefig.pad_inches``)."""


def render_mapping(model: ModelSpec, hardware: Hardware, strategy: Strategy, network: str,
                   directory: Path, stack: Stack = MEGATRON_CORE) -> list[Path]:
    """Simulate ``strategy`` (under ``stack``) with records; write ``trace.json`` and the pictures (PNG) into
    ``directory``. The worker task of :func:`palm_search.views.artifacts.attach_artifacts`: it
    lives here, with what it needs, so that a worker draws without importing Optuna or pandas
    (0.4 s of CPU per worker process).

    Raises:
        InputError: the strategy does not fit the model or machine.
    """
    timeline = simulate_timeline(model, hardware, strategy, network=network, stack=stack)
    directory.mkdir(parents=True, exist_ok=True)
    if not timeline.result.feasible:
        return []
    (directory / WINDOW_FILE).write_text(json.dumps({"window_s": timeline.window_s}))
    return [write_chrome_trace(timeline, directory / "trace.json"), *write_plots(timeline, directory, ("png",))]


WINDOW_FILE = "timeline-window.json"
"""Beside a mapping's pictures: the length (s) of its timeline's recorded window."""


def timeline_window_s(directory: Path) -> float | None:
    """The recorded window (s) of the timeline drawn in ``directory``, None if unknown."""
    path = directory / WINDOW_FILE
    return json.loads(path.read_text())["window_s"] if path.is_file() else None


def shared_timelines(folders: Mapping[K, Path], draw: Callable[[K, Path, float], object]) -> dict[K, Path]:
    """The timelines of the ``folders`` (each one mapping's, :func:`render_mapping`) whose window
    is shorter than the longest, redrawn on the longest's time axis: ``draw(key, path, window_s)``
    writes ``timeline-common-<window>.png`` once (:func:`render_timeline`). Returns the redrawn
    paths by key; empty when fewer than two folders or a window is unknown."""
    windows = {key: timeline_window_s(folder) for key, folder in folders.items()}
    known = [w for w in windows.values() if w is not None]
    if len(folders) < 2 or len(known) < len(folders):
        return {}
    common, redrawn = max(known), {}
    for key, folder in folders.items():
        if (windows[key] or 0.0) < common:
            path = folder / f"timeline-common-{common:.6g}.png"
            if not path.is_file():
                draw(key, path, common)
            redrawn[key] = path
    return redrawn


def render_timeline(model: ModelSpec, hardware: Hardware, strategy: Strategy, network: str, path: Path,
                    window_s: float, stack: Stack = MEGATRON_CORE) -> Path:
    """Simulate ``strategy`` with records and draw its timeline alone into ``path`` (PNG) on a
    time axis of ``window_s`` seconds (a window shared with another mapping's timeline)."""
    figure = plot_timeline(simulate_timeline(model, hardware, strategy, network=network, stack=stack), window_s)
    box = figure.get_tightbbox(FigureCanvasAgg(figure).get_renderer()).padded(TIGHT_PAD_IN)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, bbox_inches=box)
    return path


def write_plots(timeline: Timeline, directory: str | Path, formats: tuple[str, ...] = PAPER_FORMATS) -> list[Path]:
    """Write timeline, placement and heatmap into ``directory``, one file per format (suffix)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, plot in zip(PICTURES, (plot_timeline, plot_placement, plot_heatmap), strict=True):
        figure = plot(timeline)
        box = figure.get_tightbbox(FigureCanvasAgg(figure).get_renderer()).padded(TIGHT_PAD_IN)
        for suffix in formats:  # one layout for all ("tight" would lay the figure out per file)
            path = directory / f"{name}.{suffix}"
            figure.savefig(path, dpi=110, bbox_inches=box)
            written.append(path)
    return written


def _title(timeline: Timeline) -> str:
    r, s = timeline.result, timeline.result.strategy
    return (f"{r.model} on {r.hardware}: TP {s['tp']} x PP {s['pp']} x DP {s['dp']}, microbatch {s['microbatch_size']},"
            f" {s['schedule']}, {s['placement']}")


# -- timeline ------------------------------------------------------------------------------------


def plot_timeline(timeline: Timeline, window_s: float | None = None) -> Figure:
    """Gantt chart of the recorded window: stages top to bottom, passes coloured by kind, the
    microbatch number inside slices wide enough to hold it. With ``window_s`` (s), the time axis
    runs to it (a window shared with another mapping's timeline, so both read on one scale)."""
    pp = len(timeline.placements)
    width_in = WIDTH_IN
    figure = Figure(figsize=(width_in, 1.5 + 0.24 * max(pp, 3)))
    axes = figure.add_subplot()
    window = max(timeline.window_s or 0.0, window_s or 0.0) or 1.0
    label_s = window * 0.16 / width_in
    bars: dict[tuple[int, PassKind | str], list[tuple[float, float]]] = {}
    for s in stage_slices(timeline):
        kind: PassKind | str = s.pass_kind or "bubble"
        y = s.args["stage"]
        bars.setdefault((y, kind), []).append((s.start_s, s.end_s - s.start_s))
        if kind in NUMBERED and s.end_s - s.start_s >= label_s:
            axes.text((s.start_s + s.end_s) / 2, y, str(s.args["microbatch"]), ha="center", va="center",
                      fontsize=7, color="white")
    for (y, kind), spans in bars.items():  # one collection per stage and kind: matplotlib rescales per call
        axes.broken_barh(spans, (y - 0.4, 0.8), facecolors=PASS_COLOURS[kind],
                         edgecolor="white" if kind != "bubble" else "none", linewidth=0.3)
    axes.set_ylim(pp - 0.5, -0.5)
    axes.set_xlim(0, window)
    axes.set_yticks(range(pp), [f"stage {i}" for i in range(pp)], fontsize=7 if pp > 12 else 8)
    axes.tick_params(axis="x", labelsize=8)
    r = timeline.result
    axes.set_xlabel(f"time (s) in a window of {timeline.window_microbatches} of {r.num_microbatches} microbatches;"
                    f" iteration {r.iteration_time_s:.4g} s, bubble {r.bubble_fraction:.1%}"
                    + (f"\naxis to {window:.4g} s, the window shared with the mapping beside it" if window_s else ""),
                    fontsize=8)
    axes.set_title(_title(timeline), fontsize=9)
    shown = [k for k in PASS_COLOURS if k in LEGEND or any(kind == k for _, kind in bars)]
    handles = [Rectangle((0, 0), 1, 1, color=PASS_COLOURS[k]) for k in shown]
    axes.legend(handles, [PASS_LABELS[k] for k in shown], loc="upper center",
                bbox_to_anchor=(0.5, -0.12 - 1.2 / (pp + 6)), ncol=5, frameon=False, fontsize=8)
    return figure


# -- machine grid --------------------------------------------------------------------------------


class _Grid:
    """Cell positions of devices and the frames of dies, nodes or planes, as the machine's
    topology draws itself (:meth:`simulator.network.topology.Topology.drawing`)."""

    def __init__(self, timeline: Timeline) -> None:
        used = max(d for p in timeline.placements for d in p.devices) + 1
        self.drawing = drawing = timeline.topology.drawing(used)
        self.width, self.height = drawing.width, drawing.height
        self.position = lambda d: drawing.positions[d]
        self.devices = range(len(drawing.positions))
        self.boxes = drawing.boxes
        self.box_name = drawing.box_name

    def figure(self, extra_width_in: float = 0.0) -> tuple[Figure, object]:
        scale = min(0.62, (WIDTH_IN - 0.6 - extra_width_in) / self.width, 9.0 / self.height)
        figure = Figure(figsize=(WIDTH_IN, max(3.0, self.height * scale + 1.2)))
        axes = figure.add_subplot()
        axes.set_xlim(-1, self.width)
        axes.set_ylim(self.height, -1)
        axes.set_aspect("equal")
        axes.set_xticks([])
        axes.set_yticks([])
        for side in axes.spines.values():
            side.set_visible(False)
        return figure, axes

    def draw_boxes(self, axes) -> None:
        for x, y, w, h in self.boxes:
            axes.add_patch(Rectangle((x - 0.5, y - 0.5), w, h, fill=False, edgecolor="black", linewidth=3.0,
                                     zorder=1.5))


def _stage_colours(pp: int) -> list:
    if pp <= 20:
        table = colormaps["tab20"].colors
        order = [*range(0, 20, 2), *range(1, 20, 2)]
        return [table[order[i]] for i in range(pp)]
    return [colormaps["turbo"](i / max(pp - 1, 1)) for i in range(pp)]


def plot_placement(timeline: Timeline) -> Figure:
    """Dies (or nodes) and cores (or GPUs) as the machine lays them out, each core coloured by
    its pipeline stage and labelled ``stage.tp-group``; TP groups outlined. A machine drawn with
    more than :data:`AGGREGATE_DEVICES` devices in several boxes (a 1,024-GPU cluster) is drawn
    one cell per box instead (:func:`_placement_by_box`)."""
    grid = _Grid(timeline)
    if len(grid.boxes) > 1 and len(grid.devices) > AGGREGATE_DEVICES:
        return _placement_by_box(timeline, grid)
    figure, axes = grid.figure()
    colours = _stage_colours(len(timeline.placements))
    small = grid.width > 12 or grid.height > 12
    squares: list[tuple[tuple[int, int], object]] = []
    for stage, placement in enumerate(timeline.placements):
        for group_index, group in enumerate(placement.tp_groups):
            cells = {grid.position(d) for d in group}
            for x, y in cells:
                squares.append(((x, y), colours[stage]))
                axes.text(x, y, f"s{stage}\nt{group_index}", ha="center", va="center", fontsize=5 if small else 7)
            _outline(axes, cells)
    used = {d for p in timeline.placements for d in p.devices}
    squares += [(grid.position(d), "#F2F2F2") for d in grid.devices if d not in used]
    _squares(axes, [xy for xy, _ in squares], [c for _, c in squares], 0.9)
    grid.draw_boxes(axes)
    axes.set_title(f"{_title(timeline)}\ncell: s<pipeline stage> t<TP group of the stage: the stage's TP groups are"
                   f" its data-parallel replicas>;\ndark outline: one TP group; thick black: {grid.box_name}",
                   fontsize=8)
    return figure


AGGREGATE_DEVICES = 256
"""Above this many drawn devices, the placement shows one cell per node (or die), not per device."""


def _placement_by_box(timeline: Timeline, grid: _Grid) -> Figure:
    """The placement one cell per box of the machine (node, die), in rows of up to 16, coloured
    by the pipeline stage its devices serve and labelled with the stage(s) and devices used."""
    boxes = list(grid.boxes)
    box_of = {(x + i, y + j): b for b, (x, y, w, h) in enumerate(boxes) for i in range(w) for j in range(h)}
    stages: dict[int, set[int]] = {}
    used: dict[int, int] = {}
    for stage, placement in enumerate(timeline.placements):
        for device in placement.devices:
            box = box_of.get(tuple(grid.position(device)))
            if box is not None:
                stages.setdefault(box, set()).add(stage)
                used[box] = used.get(box, 0) + 1
    figure, axes, centres = _box_figure(len(boxes))
    colours = _stage_colours(len(timeline.placements))
    _squares(axes, centres, [colours[min(stages[b])] if b in stages else "#F2F2F2" for b in range(len(boxes))], 0.92)
    size = boxes[0][2] * boxes[0][3]
    for b, (x, y) in enumerate(centres):
        if b in stages:
            names = sorted(stages[b])
            label = f"s{names[0]}" if len(names) == 1 else f"s{names[0]}-{names[-1]}"
            axes.text(x, y, label + ("" if used[b] == size else f"\n{used[b]}/{size}"), ha="center", va="center",
                      fontsize=7)
    axes.set_title(f"{_title(timeline)}\none cell per {grid.box_name} ({len(boxes)} of {size} devices each):"
                   f" s<pipeline stage> it serves, colour by stage;\nn/{size}: devices used when not all; grey: idle",
                   fontsize=8)
    return figure


def _box_figure(boxes: int) -> tuple[Figure, object, list[tuple[int, int]]]:
    """A figure of one cell per box (node, die), in rows of up to 16, and each box's centre."""
    columns = min(16, boxes)
    rows = -(-boxes // columns)
    figure = Figure(figsize=(WIDTH_IN, max(2.5, rows * WIDTH_IN / columns * 0.75 + 1.3)))
    axes = figure.add_subplot()
    axes.set_xlim(-0.6, columns - 0.4)
    axes.set_ylim(rows - 0.4, -0.6)
    axes.set_aspect("equal")
    axes.set_xticks([])
    axes.set_yticks([])
    for side in axes.spines.values():
        side.set_visible(False)
    return figure, axes, [(b % columns, b // columns) for b in range(boxes)]


def _squares(axes, centres: list[tuple[int, int]], colours: list, size: float, zorder: float = 1.0) -> None:
    """Filled squares of side ``size`` centred on ``centres``, as one collection (one draw call)."""
    half = size / 2
    axes.add_collection(PatchCollection([Rectangle((x - half, y - half), size, size) for x, y in centres],
                                        facecolors=colours, edgecolors="none", zorder=zorder))


def _outline(axes, cells: set[tuple[int, int]]) -> None:
    """Draw the border of a set of grid cells."""
    segments = []
    for x, y in cells:
        sides = ((1, 0, [(x + .5, y - .5), (x + .5, y + .5)]), (-1, 0, [(x - .5, y - .5), (x - .5, y + .5)]),
                 (0, 1, [(x - .5, y + .5), (x + .5, y + .5)]), (0, -1, [(x - .5, y - .5), (x + .5, y - .5)]))
        for dx, dy, seg in sides:
            if (x + dx, y + dy) not in cells:
                segments.append(seg)
    axes.add_collection(LineCollection(segments, colors="#202020", linewidths=2.4, zorder=3))


# -- heat map ------------------------------------------------------------------------------------


def plot_heatmap(timeline: Timeline) -> Figure:
    """Utilisation over the iteration of every resource where the machine draws it: a link as a
    segment between device centres (each direction offset to its right), a DRAM port as a square
    on its die's edge, a device's ports as its cell's colour or its dot."""
    grid = _Grid(timeline)
    if len(grid.boxes) > 1 and len(grid.devices) > AGGREGATE_DEVICES:
        return _heatmap_by_box(timeline, grid)
    figure, axes = grid.figure(extra_width_in=1.2)
    norm = LogNorm(1e-3, 1.0, clip=True)
    _squares(axes, list(grid.drawing.positions), ["#F0F0F0"] * len(grid.drawing.positions), 0.6, zorder=0)
    _heat(axes, timeline, grid, norm)
    grid.draw_boxes(axes)
    figure.colorbar(_mappable(norm), ax=axes, fraction=0.03, pad=0.02,
                    label="utilisation over the iteration (log scale)")
    hot = sorted(timeline.utilisation.items(), key=lambda kv: -kv[1])[:3]
    hottest = ", ".join(f"{name} {u:.0%}" for name, u in hot if u > 0) or "no traffic"
    axes.set_title(f"{_title(timeline)}\n{grid.drawing.legend};\nhottest: {hottest}", fontsize=8)
    return figure


def _heatmap_by_box(timeline: Timeline, grid: _Grid) -> Figure:
    """The heat map one cell per box of the machine (node, die), coloured and labelled by the
    busiest resource among its devices' links, ports and NICs (a 1,024-GPU cluster stays legible)."""
    boxes = list(grid.boxes)
    box_of = {(x + i, y + j): b for b, (x, y, w, h) in enumerate(boxes) for i in range(w) for j in range(h)}
    util = [timeline.utilisation.get(name, 0.0) for name in timeline.topology.names]
    busiest = [0.0] * len(boxes)
    for mark in grid.drawing.marks:
        where = grid.position(mark.devices[0]) if mark.devices else mark.point
        box = box_of.get((round(where[0]), round(where[1]))) if where is not None else None
        if box is not None:
            busiest[box] = max(busiest[box], util[mark.resource])
    figure, axes, centres = _box_figure(len(boxes))
    norm = LogNorm(1e-3, 1.0, clip=True)
    _squares(axes, centres, [HEAT(norm(v)) if v > 0 else "#F2F2F2" for v in busiest], 0.92)
    for (x, y), value in zip(centres, busiest, strict=True):
        if value > 0:
            axes.text(x, y, f"{value:.0%}", ha="center", va="center", fontsize=7)
    figure.colorbar(_mappable(norm), ax=axes, fraction=0.03, pad=0.02, label="busiest resource (log scale)")
    axes.set_title(f"{_title(timeline)}\none cell per {grid.box_name} ({len(centres)}): utilisation of its busiest"
                   " link, port or NIC; grey: no traffic", fontsize=8)
    return figure


def _mappable(norm):
    from matplotlib.cm import ScalarMappable

    return ScalarMappable(norm=norm, cmap=HEAT)


def _heat(axes, timeline: Timeline, grid: _Grid, norm) -> None:
    """Draw every mark of the machine coloured by its resource's utilisation."""
    names = timeline.topology.names
    util = [timeline.utilisation.get(name, 0.0) for name in names]
    segments, values = [], []
    ports: dict[tuple[float, float], float] = {}
    cells: dict[int, float] = {}
    dots: dict[int, float] = {}
    for mark in grid.drawing.marks:
        value = util[mark.resource]
        if mark.shape == "link":
            segments.append(_segment(grid, *mark.devices))
            values.append(value)
        elif mark.shape == "port":
            ports[mark.point] = value
        else:
            into = cells if mark.shape == "cell" else dots
            into[mark.devices[0]] = max(into.get(mark.devices[0], 0.0), value)
    axes.add_collection(LineCollection(segments, cmap=HEAT, norm=norm, array=values, linewidths=2.2, zorder=2))
    _squares(axes, [grid.position(d) for d in cells], [HEAT(norm(v)) for v in cells.values()], 0.9)
    for marks, shape, size, edge in ((ports, "s", 70, "black"),
                                     ({grid.position(d): v for d, v in dots.items()}, "o", 40, "white")):
        if marks:
            axes.scatter([x for x, _ in marks], [y for _, y in marks], marker=shape, s=size, edgecolors=edge,
                         color=[HEAT(norm(v)) for v in marks.values()], linewidths=0.8, zorder=3)


def _segment(grid: _Grid, a: int, b: int) -> list[tuple[float, float]]:
    """A link's segment from ``a`` toward ``b``, shortened and offset to its right."""
    (x0, y0), (x1, y1) = grid.position(a), grid.position(b)
    ox, oy = (y1 - y0) * 0.12, (x0 - x1) * 0.12
    return [(x0 + ox + (x1 - x0) * 0.2, y0 + oy + (y1 - y0) * 0.2),
            (x1 + ox - (x1 - x0) * 0.2, y1 + oy - (y1 - y0) * 0.2)]
