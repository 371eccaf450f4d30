"""``palm-search validate``: the simulator against published measurements.

Suites read ``studies/validation/<source>/<table>/data.csv`` (each with a ``SOURCE.md`` saying
what is measured and how it converts). Where a source does not state a setting (micro-batch size,
interleaving, the mapping of an inference run), the row is simulated for every legal choice and
the fastest feasible one is kept, as the authors tuned theirs; the report says what was chosen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from functools import partial
from importlib.resources import files
from pathlib import Path
from typing import Any

import pandas as pd
from joblib import Parallel, delayed

from palm_search.search.baseline import lowest_fitting_zero
from simulator import (
    ATTENTION_SPLITS,
    MEGATRON_CORE,
    BlockTuning,
    Hardware,
    ModelSpec,
    PassKind,
    Stack,
    Strategy,
    estimate_samples_per_s,
    grid_gemm,
    load_hardware,
    load_model,
    load_stack,
    simulate,
    simulate_with_records,
)
from simulator.legality import interleaving_legal, megatron_interleaving
from simulator.network import topology_of
from simulator.workload import model_flops_per_iteration
from spaces import enumerate_degrees

_CHECKOUT_DATA = Path(__file__).resolve().parents[2] / "studies" / "validation"
DATA_DIR = _CHECKOUT_DATA if _CHECKOUT_DATA.is_dir() else Path(str(files("palm_search.validation_data")))
"""The suites' data: ``studies/validation`` of the checkout this module runs from, else (a
wheel) the same folder installed as package data (an editable install maps that to the
checkout it was installed from, which need not be this one)."""
MICROBATCH_SIZES = (1, 2, 4, 8)
INFERENCE_MICROBATCH_SIZES = (1, 2, 4, 8, 16, 32)
HIGHLY_DIVISIBLE_BATCH = 720720
"""Divisible by 1..16 and more: lets every data-parallel degree be legal for an inference mapping."""


@dataclass(frozen=True, slots=True)
class ValidationRow:
    """One case: the published figure, ours, and the relative error ``predicted/published - 1``.

    ``measured`` is False for rows that do not enter a suite's error statistics, ``excluded_as``
    saying why: a cross-check against a non-measurement (PALM Table VII), a measurement
    ``reported`` beside a later release's of the same configuration, or a configuration ``not
    expressible`` as a strategy (not simulated). ``group`` splits a suite's statistics (e.g. by
    card and by where the operands live).
    """

    suite: str
    case: str
    unit: str
    published: float
    predicted: float
    error: float
    chosen: str
    measured: bool = True
    note: str = ""
    group: str = ""
    excluded_as: str = ""


def _best(model: ModelSpec, hardware: Hardware, strategies: Iterator[Strategy],
          stack: Stack = MEGATRON_CORE) -> tuple[float, Strategy | None]:
    """The largest samples/s among the feasible strategies under ``stack``, and that strategy."""
    best, chosen = 0.0, None
    for strategy in strategies:
        result = simulate(model, hardware, strategy, stack=stack)
        if result.feasible and result.samples_per_s > best:
            best, chosen = result.samples_per_s, strategy
    return best, chosen


def _training_candidates(model: ModelSpec, tp: int, pp: int, dp: int, batch: int,
                         microbatch_sizes: tuple[int, ...] = MICROBATCH_SIZES) -> Iterator[Strategy]:
    """Every legal micro-batch size (of ``microbatch_sizes``) and schedule for fixed degrees (full
    recompute, uniform stages, as Megatron-LM)."""
    for b in microbatch_sizes:
        if batch % (b * dp):
            continue
        m = batch // (b * dp)
        chunks = range(2, model.num_layers // pp + 1) if interleaving_legal(pp, m) else ()
        schedules = [("1f1b", 1)] + [("interleaved-1f1b", v) for v in chunks
                                     if megatron_interleaving(model.num_layers, pp, v)]
        for schedule, v in schedules:
            yield Strategy(tp=tp, pp=pp, dp=dp, microbatch_size=b, global_batch_size=batch, schedule=schedule,
                           num_chunks=v, recompute="full", partition="uniform", p2p_blocking=True)


def _describe(strategy: Strategy | None) -> str:
    if strategy is None:
        return "no feasible choice"
    chunks = f" v={strategy.num_chunks}" if strategy.num_chunks > 1 else ""
    zero = f" ZeRO-{strategy.zero_stage}" if strategy.zero_stage else ""
    training = strategy.training
    recompute = f" {strategy.recompute} recompute" if training and strategy.recompute != "none" else ""
    if training and strategy.recompute == "selective" and strategy.recompute_modules != "core_attn":
        recompute += f" ({strategy.recompute_modules})"
    flags = ((strategy.sequence_parallel, " SP"), (strategy.tp_overlap, " overlap"),
             (strategy.p2p_blocking, " blocking-p2p"))
    extras = "".join(text for on, text in flags if on)
    context = f" cp={strategy.cp}" if strategy.cp > 1 else ""
    context += " attention by users" if strategy.attention_split == "users" else ""
    experts = f" ep={strategy.ep}" if strategy.ep > 1 else ""
    experts += f" etp={strategy.etp}" if strategy.etp is not None and strategy.etp != strategy.tp else ""
    experts += " EP overlap" if strategy.ep_overlap else ""
    precision = f" {strategy.precision}" if strategy.precision == "fp8" else ""
    return (f"tp={strategy.tp} pp={strategy.pp} dp={strategy.dp}{context}{experts} b={strategy.microbatch_size} "
            f"{strategy.schedule}{chunks}{zero}{recompute}{extras}{precision}")


def _row(suite: str, case: str, unit: str, published: float, predicted: float, chosen: str, **extra) -> ValidationRow:
    error = predicted / published - 1 if predicted > 0 else -1.0
    return ValidationRow(suite, case, unit, published, predicted, error, chosen, **extra)


MEGATRON_SEQUENCE_LENGTH = 2048
MEGATRON_VOCAB_SIZE = 51200
"""Sequence and vocabulary of the Megatron-LM GPT runs: Narayanan et al. SC'21 §5.1 ("vocabulary
size of 51,200 ... sequence length of 2048"), Korthikanti et al. MLSys'23 §6 (the same)."""


def _gpt(name: str, layers: int, hidden: int, heads: int, batch: int) -> ModelSpec:
    """A Megatron-LM GPT model as the sources' tables give it (``f = 4h``)."""
    return ModelSpec(name=name, architecture="gpt", num_layers=layers, hidden_size=hidden, num_heads=heads,
                     ffn_hidden_size=4 * hidden, sequence_length=MEGATRON_SEQUENCE_LENGTH,
                     vocab_size=MEGATRON_VOCAB_SIZE, global_batch_size=batch)


def narayanan_row(record: dict) -> ValidationRow:
    """Narayanan SC'21 Tables 1 and 2: TFLOP/s per GPU through their Eq. 3."""
    tp, pp, gpus, batch = record["tp"], record["pp"], record["gpus"], record["global_batch_size"]
    model = _gpt(record["model"], record["layers"], record["hidden"], record["heads"], batch)
    hardware = load_hardware("a100-cluster")
    sizes = (int(record["microbatch_size"]),) if "microbatch_size" in record else MICROBATCH_SIZES
    samples_per_s, chosen = _best(model, hardware,
                                  _training_candidates(model, tp, pp, gpus // (tp * pp), batch, sizes))
    flop = model_flops_per_iteration(model, batch, recompute=True)
    predicted = flop * samples_per_s / batch / gpus / 1e12 if samples_per_s else 0.0
    return _row(record["suite"], record["model"], "TFLOP/s per GPU", record["tflops_per_gpu"], predicted,
                _describe(chosen))


ZERO3_STACK = "deepspeed-0.3-zero3"
"""The stack of the Table 2 ZeRO-3 rows: DeepSpeed of April 2021 (the paper names no version)."""


def narayanan_zero3_row(record: dict) -> ValidationRow:
    """Narayanan SC'21 Table 2, ZeRO-3 rows: TFLOP/s per GPU (their Eq. 3) of ZeRO-3 without model
    parallelism, one microbatch of the stated size per GPU, full recompute, fp16, under the
    DeepSpeed 2021 stack (:data:`ZERO3_STACK`)."""
    gpus, batch, size = int(record["gpus"]), int(record["global_batch_size"]), int(record["microbatch_size"])
    model = _gpt(record["model"], record["layers"], record["hidden"], record["heads"], batch)
    strategy = Strategy(dp=gpus, microbatch_size=size, global_batch_size=batch, zero_stage=3, recompute="full",
                        precision="fp16")
    result = simulate(model, load_hardware("a100-cluster"), strategy, stack=load_stack(ZERO3_STACK))
    flop = model_flops_per_iteration(model, batch, recompute=True)
    predicted = flop * result.samples_per_s / batch / gpus / 1e12 if result.feasible else 0.0
    return _row(record["suite"], f"{record['model']} {gpus} GPUs", "TFLOP/s per GPU", record["tflops_per_gpu"],
                predicted, _describe(strategy), note=f"stack {ZERO3_STACK}")


def palm_table4_row(record: dict) -> ValidationRow:
    """PALM Table IV: sequences per second against Megatron's published figure."""
    model, hardware = load_model(record["model"]), load_hardware("a100-cluster")
    tp, pp, dp = record["tp"], record["pp"], record["dp"]
    samples_per_s, chosen = _best(model, hardware,
                                  _training_candidates(model, tp, pp, dp, model.global_batch_size))
    return _row("palm-table4", record["model"], "seq/s", record["published_seq_per_s"], samples_per_s,
                _describe(chosen), note=f"PALM predicted {record['palm_seq_per_s']}")


def _pass_s(model: ModelSpec, strategy: Strategy, kind: PassKind) -> float:
    """Duration of the one forward or backward pass of a 1-stage, 1-microbatch run (s)."""
    _, records = simulate_with_records(model, load_hardware("a100-cluster"), strategy)
    return next(r.end_s - r.start_s for r in records if r.kind is kind)


def korthikanti_layer_row(record: dict) -> ValidationRow:
    """Korthikanti et al. MLSys'23 Table 4: one 22B layer's forward or backward time (ms), as
    the pass-time difference of a 2-layer and a 1-layer model (embedding and logits cancel)."""
    strategy = Strategy(tp=8, microbatch_size=4, global_batch_size=4, recompute=record["recompute"],
                        sequence_parallel=bool(record["sequence_parallel"]), tp_overlap=True)
    kind = PassKind.FORWARD if record["pass"] == "forward" else PassKind.BACKWARD
    two, one = (_pass_s(_gpt("GPT-22B", layers, 6144, 64, 4), strategy, kind) for layers in (2, 1))
    return _row("korthikanti-table4", f"{record['experiment']}, {record['pass']}", "ms per layer",
                record["time_ms"], (two - one) * 1e3, _describe(strategy))


def korthikanti_row(record: dict) -> ValidationRow:
    """Korthikanti et al. MLSys'23 Table 5: samples/s (global batch / iteration time) of the
    stated strategy, with the backward TP all-reduce overlapped as their §6.2 says."""
    model = _gpt(f"GPT-{record['model']}", record["layers"], record["hidden"], record["heads"],
                 record["global_batch_size"])
    chunks = record["num_chunks"]
    strategy = Strategy(tp=record["tp"], pp=record["pp"], dp=record["gpus"] // (record["tp"] * record["pp"]),
                        microbatch_size=record["microbatch_size"], global_batch_size=record["global_batch_size"],
                        schedule="interleaved-1f1b" if chunks > 1 else "1f1b", num_chunks=chunks,
                        recompute=record["recompute"], sequence_parallel=bool(record["sequence_parallel"]),
                        tp_overlap=True, p2p_blocking=True, partition="uniform")
    result = simulate(model, load_hardware("a100-cluster"), strategy)
    published = record["global_batch_size"] / record["iteration_time_s"]
    case = f"{record['model']} {record['recompute']}{' + SP' if strategy.sequence_parallel else ''}"
    return _row("korthikanti-table5", case, "samples/s", published, result.samples_per_s if result.feasible else 0.0,
                _describe(strategy), note=f"{record['iteration_time_s']} s per iteration")


def _bridge_strategy(record: dict, ep: int = 1, etp: int | None = None) -> Strategy:
    """The stated mapping of a Megatron-Bridge row as its recipe runs it: the printed TP, PP, CP,
    VP (interleaved 1F1B with ``vp`` chunks when > 1), EP, the recipe's expert TP ``etp`` (None:
    ``tp``), GBS and MBS, DP = GPUs / (TP PP CP);
    Megatron-core's distributed optimizer (ZeRO-1) or, FSDP printed 1, its FSDP (ZeRO-3);
    sequence parallelism and overlapped TP communication with TP, FlashAttention, even layers per
    (virtual) stage; FP8 with the scaling recipe the page prints (``fp8_recipe``: "FP8-CS",
    current scaling, from 25.11; NeMo 24.07's TE 1.x had delayed scaling only); selective
    recompute of the recipe's ``recompute_modules`` where the record
    names them (Megatron-Bridge ``scripts/performance/utils/overrides.py``: "recompute_granularity
    = 'selective'" with them), and the expert all-to-all overlap where its ``ep_overlap`` says the
    recipe sets ``moe_a2a_overlap`` (the same file: ``overlap_moe_expert_parallel_comm = True``).

    Raises:
        InputError: a mapping the strategy cannot express (e.g. ``ep`` not dividing ``dp * cp``).
    """
    tp, pp, cp, vp = (int(record[k]) for k in ("tp", "pp", "cp", "vp"))
    return Strategy(tp=tp, pp=pp, cp=cp, dp=int(record["gpus"]) // (tp * pp * cp), ep=ep,
                    etp=None if etp == tp else etp,
                    microbatch_size=int(record["mbs"]), global_batch_size=int(record["gbs"]),
                    schedule="interleaved-1f1b" if vp > 1 else "1f1b", num_chunks=vp, precision=record["precision"],
                    fp8_recipe=record["fp8_recipe"] if isinstance(record.get("fp8_recipe"), str) else "delayed",
                    zero_stage=3 if int(record["fsdp"]) else 1, sequence_parallel=tp > 1, tp_overlap=tp > 1,
                    attention="fused", partition="uniform", ep_overlap=str(record.get("ep_overlap")).lower() == "true",
                    **_recompute(record))


def _recompute(record: dict) -> dict[str, str]:
    """The record's ``recompute`` (default ``none``), selective of its ``recompute_modules`` where
    it names some."""
    modules = record.get("recompute_modules")
    if isinstance(modules, str) and modules:  # an empty cell reads as NaN
        return {"recompute": "selective", "recompute_modules": modules}
    return {"recompute": record.get("recompute", "none")}


def _tokens_per_s_per_gpu(model: ModelSpec, strategy: Strategy, gpus: int) -> tuple[float, str]:
    """Tokens/s per GPU of ``strategy`` on ``h100-cluster`` (0 if it does not fit) and, if it
    does not, why ("" if it does)."""
    result = simulate(model, load_hardware("h100-cluster"), strategy)
    if not result.feasible:
        return 0.0, f"does not fit: {result.reason}"
    return result.samples_per_s * model.sequence_length / gpus, ""


def megatron_bridge_row(record: dict) -> ValidationRow:
    """NVIDIA's Megatron-Bridge performance summary on DGX H100: tokens/s per GPU of the stated
    pre-training recipe on ``h100-cluster`` (:func:`_bridge_strategy`; see the suite's SOURCE.md)."""
    gpus = int(record["gpus"])
    model = ModelSpec(name=record["model"], architecture="llama", num_layers=int(record["layers"]),
                      hidden_size=int(record["hidden"]), num_heads=int(record["heads"]),
                      num_kv_heads=int(record["kv_heads"]), ffn_hidden_size=int(record["ffn"]),
                      sequence_length=int(record["seq_length"]), vocab_size=int(record["vocab"]),
                      global_batch_size=int(record["gbs"]))
    strategy = _bridge_strategy(record)
    predicted, unfit = _tokens_per_s_per_gpu(model, strategy, gpus)
    return _row(record["suite"], f"{record['model']} {record['precision']} {gpus} GPUs", "tokens/s per GPU",
                record["tokens_per_s_per_gpu"], predicted, _describe(strategy),
                note="; ".join(filter(None, (f"release {record['version']}", unfit))))


def megatron_bridge_moe_row(record: dict) -> ValidationRow:
    """The Megatron-Bridge summary's DGX-H100 Mixture-of-Experts rows: a model preset (its
    Hugging Face config) at the row's sequence and batch, the stated mapping with expert
    parallelism and the recipe's expert tensor parallelism (:func:`_bridge_strategy`). A row
    whose configuration a later release printed again (``superseded_by``) is reported, not
    counted. A mapping the strategy cannot express is kept, not simulated, not counted (see the
    suite's SOURCE.md)."""
    from simulator import InputError

    gpus, release, later = int(record["gpus"]), record["version"], record["superseded_by"]
    model = dataclasses.replace(load_model(record["model"]), sequence_length=int(record["seq_length"]),
                                global_batch_size=int(record["gbs"]))
    args = (record["suite"], f"{record['model']} {record['precision']} {gpus} GPUs {release}", "tokens/s per GPU",
            record["tokens_per_s_per_gpu"])
    source = f"release {release} (L{record['line']})"
    try:
        strategy = _bridge_strategy(record, ep=int(record["ep"]), etp=int(record["etp"]))
    except InputError as error:
        return _row(*args, 0.0, "not expressible", measured=False, excluded_as="not expressible",
                    note=f"{source}: {error}")
    reported = isinstance(later, str)
    predicted, unfit = _tokens_per_s_per_gpu(model, strategy, gpus)
    note = "; ".join(filter(None, (source, f"reported, {later} counts" if reported else "", unfit)))
    return _row(*args, predicted, _describe(strategy), measured=not reported,
                excluded_as="reported" if reported else "", note=note)


TORCHTITAN_MODELS = {"llama3.1-8b": "Llama-3.1-8B", "llama3.1-70b": "Llama-3.1-70B", "llama3.1-405b": "Llama-3.1-405B"}
TORCHTITAN_STACK = "torchtitan-fsdp2"
TORCHTITAN_EAGER_STACK = "torchtitan-fsdp2-eager"
"""The stack of a row run without ``torch.compile`` (its eager kernels' traffic)."""
TORCHTITAN_RECOMPUTE = {"SAC": "selective", "per-op SAC": "selective", "full": "full"}
"""torchtitan's activation checkpointing -> the simulator's recompute: ``selective`` under the
torchtitan stacks is its per-op policy (``selective_recompute = "alternate_matmuls"``)."""


def torchtitan_row(record: dict) -> ValidationRow:
    """torchtitan's Llama 3.1 H100 benchmarks: tokens/s per GPU under the FSDP2 stack on the hosts
    the files describe (``grand-teton-h100.toml`` beside the data), FSDP (ZeRO-3) over ``fsdp`` x
    ``cp`` ranks, sequence parallelism with TP, async TP as overlapped TP communication, float8 as
    ``fp8``, fused attention, ``pp`` microbatches per iteration (torchtitan's default), two chunks
    per rank for Interleaved1F1B; without ``torch.compile`` the eager stack
    (:data:`TORCHTITAN_EAGER_STACK`)."""
    tp, pp, cp, fsdp, local = (int(record[k]) for k in ("tp", "pp", "cp", "fsdp", "local_batch"))
    seq, gpus = int(record["seq_len"]), int(record["num_gpus"])
    batch = local * fsdp
    model = dataclasses.replace(load_model(TORCHTITAN_MODELS[record["model"]]), sequence_length=seq,
                                global_batch_size=batch)
    interleaved = record["pp_schedule"] == "Interleaved1F1B"
    strategy = Strategy(tp=tp, pp=pp, cp=cp, dp=fsdp, microbatch_size=local // pp, global_batch_size=batch,
                        schedule="interleaved-1f1b" if interleaved else "1f1b", num_chunks=2 if interleaved else 1,
                        zero_stage=3, recompute=TORCHTITAN_RECOMPUTE[record["ac"]], sequence_parallel=tp > 1,
                        tp_overlap=record["async_tp"] == "yes", attention="fused",
                        precision="bf16" if record["float8"] == "no" else "fp8")
    hardware = load_hardware(Path(record["data"]) / "grand-teton-h100.toml")
    stack = TORCHTITAN_STACK if record["compile"] == "yes" else TORCHTITAN_EAGER_STACK
    result = simulate(model, hardware, strategy, stack=load_stack(stack))
    predicted = result.samples_per_s * seq / gpus if result.feasible else 0.0
    case = (f"{record['file']} {record['table']} {record['model']} {gpus} GPUs seq {seq}"
            f"{' compile' if record['compile'] == 'yes' else ''}"
            f"{' float8 ' + record['float8'] if record['float8'] != 'no' else ''}"
            f"{' async-TP' if record['async_tp'] == 'yes' else ''}")
    return _row(record["suite"], case, "tokens/s per GPU", float(record["tps_per_gpu"]), predicted,
                _describe(strategy), note=result.reason if not result.feasible else f"stack {stack}",
                group=record["model"])


def trtllm_row(record: dict) -> ValidationRow:
    """TensorRT-LLM's published static-batch throughput (gptSessionBenchmark): output tokens/s per
    GPU of ``b`` users' prefill of ``s_in`` tokens (one microbatch; it gives the first output
    token) and the ``s_out - 1`` decode steps after it, ``out_tps = s_out b / latency / tp``
    (TensorRT-LLM ``docs/source/blogs/XQA-kernel.md``: "out_tps=output_seqlen*batch_size/
    total_latency/tp"). Every decode step is simulated at the mean context of the steps, ``s_in +
    s_out / 2`` (contexts ``s_in + 1 .. s_in + s_out - 1``): only the attention core's cached
    keys and values grow with the context, so a step's time is affine in it and the mean
    context's step is the mean step (a test checks this against the two ends)."""
    model, hardware, stack = load_model(record["model"]), load_hardware(record["preset"]), load_stack(record["stack"])
    users, s_in, s_out, tp = (int(record[k]) for k in ("batch", "input_length", "output_length", "tp"))
    prefill = Strategy(tp=tp, microbatch_size=users, global_batch_size=users, mode="inference",
                       precision=record["precision"], prompt_length=s_in)
    step = prefill.with_fields(decode_context_length=s_in + s_out // 2)
    first, decode = simulate(model, hardware, prefill, stack=stack), simulate(model, hardware, step, stack=stack)
    feasible = first.feasible and decode.feasible
    latency_s = first.iteration_time_s + (s_out - 1) * decode.iteration_time_s
    predicted = s_out * users / latency_s / int(record["gpus"]) if feasible else 0.0
    note = f"stack {record['stack']}" if feasible else (first.reason or decode.reason)
    return _row("trtllm-h100", f"{record['model']} TP{tp} batch {users} {s_in}/{s_out} {record['precision']} "
                f"{record['release']}", "output tokens/s per GPU", float(record["out_tok_per_s_per_gpu"]), predicted,
                _describe(step), note=note, group=record["release"])


STREAM_MICROBATCHES_PER_STAGE = 1000
"""An inference row's stream: ``1000 p`` microbatches, whose fill and drain (``p - 1`` slots of
``1000 p + p - 1``) cost under 0.1%: PALM §V-A3 reports steady-state throughput, fill and drain
ignored, and ``simulate`` reports a batch's own throughput (extrapolated at the steady state)."""


def _inference_candidates(model: ModelSpec, hardware: Hardware, precision: str,
                          sizes: tuple[int, ...] = INFERENCE_MICROBATCH_SIZES) -> Iterator[Strategy]:
    for d in enumerate_degrees(model, hardware, global_batch_size=HIGHLY_DIVISIBLE_BATCH):
        for b in sizes:
            batch = b * d.dp * STREAM_MICROBATCHES_PER_STAGE * d.pp
            yield Strategy(tp=d.tp, pp=d.pp, dp=d.dp, microbatch_size=b, global_batch_size=batch,
                           schedule="gpipe", mode="inference", precision=precision)


def _under(hardware: Hardware, dataflow: str | None) -> Hardware:
    """``hardware`` with its DRAM's dataflow replaced (unchanged for ``None`` or without DRAM): one
    suite run under both models, side by side."""
    if dataflow is None or hardware.memory.dram is None:
        return hardware
    dram = dataclasses.replace(hardware.memory.dram, dataflow=dataflow)
    return dataclasses.replace(hardware, memory=dataclasses.replace(hardware.memory, dram=dram))


def palm_table5_row(record: dict, dataflow: str | None = None) -> ValidationRow:
    """PALM Table V: Grayskull inference samples/s, fastest legal mapping (under ``dataflow``
    instead of the preset's, if given) at the row's stated microbatch, else the fastest of
    :data:`INFERENCE_MICROBATCH_SIZES`."""
    model, hardware = load_model(record["model"]), _under(load_hardware("grayskull"), dataflow)
    stated = record.get("microbatch_size")
    sizes = (int(stated),) if pd.notna(stated) else INFERENCE_MICROBATCH_SIZES
    samples_per_s, chosen = _best(model, hardware,
                                  _inference_candidates(model, hardware, record["precision"], sizes))
    return _row(record["suite"], record["model"], "samples/s", record["published_samples_per_s"], samples_per_s,
                _describe(chosen), note=f"PALM predicted {record['palm_samples_per_s']}")


def palm_table7_row(record: dict, dataflow: str | None = None) -> ValidationRow:
    """PALM Table VII: the wafer baseline against Megatron scaled by compute (a cross-check),
    under ``dataflow`` instead of the preset's, if given."""
    model, hardware = load_model(record["model"]), _under(load_hardware("wafer"), dataflow)
    base = {"tp": record["tp"], "dp": record["dp"], "pp": record["pp"], "recompute": "full", "schedule": "1f1b"}
    fitting = lowest_fitting_zero(base, model, hardware)
    predicted = simulate(model, hardware, fitting).samples_per_s if fitting else 0.0
    palm = record["palm_samples_per_s"]
    return _row(record["suite"], record["model"], "samples/s", record["scaled_megatron_samples_per_s"], predicted,
                _describe(fitting), measured=False, excluded_as="cross-check",
                note=f"PALM predicted {palm} (ours/PALM {predicted / palm:.2f})")


TENSTORRENT_CARDS = {"n150": "wormhole-n150", "p150": "blackhole-p150"}
TENSTORRENT_FORMATS = {"BFLOAT16": "bf16", "BFLOAT8_B": "bfloat8_b", "BFLOAT4_B": "bfloat4_b"}


def tenstorrent_gemm_row(record: dict) -> ValidationRow:
    """tt-metal GEMM_FLOPS: one matmul over the card's core grid under the benchmark's blocking
    for its shape, measured time (traced runs)."""
    hardware = load_hardware(TENSTORRENT_CARDS[record["card"]])
    m, k, n = int(record["m"]), int(record["k"]), int(record["n"])
    storage = tuple(record[f"{operand}_storage"] for operand in ("in0", "in1", "out"))
    tuning = BlockTuning(**{part: int(record[part]) for part in ("in0_block_w_div", "num_out_blocks_h",
                                                                 "num_out_blocks_w")})
    gemm = grid_gemm(hardware, m, k, n, precision=TENSTORRENT_FORMATS[record["dtype"]],
                     fidelity=record["math_fidelity"], grid=(int(record["grid_x"]), int(record["grid_y"])),
                     in_dram=tuple(where == "DRAM" for where in storage), tuning=tuning)
    lives, where = "/".join(storage), "L1" if "L1" in storage else "DRAM"
    return _row("tenstorrent-gemm", f"{record['card']} {record['grid_x']}x{record['grid_y']} {m}x{k}x{n} "
                f"{record['dtype']} {record['math_fidelity']} {lives}", "s", record["time_ns"] * 1e-9, gemm.time_s,
                f"{gemm.bound} {max(gemm.pipeline_s, gemm.compute_s) * 1e6:.0f} us, DRAM {gemm.dram_s * 1e6:.0f} us",
                group=f"{record['card']} {record['grid_x']}x{record['grid_y']} {where}")


def _cnn_candidates(model: ModelSpec, hardware: Hardware, record: dict) -> Iterator[Strategy]:
    """The mapping tt-metal's ResNet-50 runs where a strategy expresses it: every operator over
    the card's whole compute grid (``ttnn.conv2d`` height or block sharded over the grid, the
    stated batch in one call: ``models/demos/ttnn_resnet/tt/ttnn_functional_resnet50.py``), i.e.
    ``tp`` = the card's cores and the batch in one microbatch. Where no tensor-parallel group of
    every core is legal (Grayskull's 120 cores divide none of ResNet-50's channel counts), every
    legal ``tp x pp x dp`` whose ``dp`` replicas hold the batch (microbatch ``batch / dp``)
    stands for it, the fastest kept. In the row's format and fidelity (none where the hardware
    states no fidelity passes: its peak is the LoFi one)."""
    batch = int(record["batch"])
    fidelity = record["math_fidelity"] if hardware.compute.math_fidelity_phases else None
    degrees = list(enumerate_degrees(model, hardware, global_batch_size=batch))
    grid = [d for d in degrees if d.tp == hardware.num_devices]
    for d in grid or degrees:
        b = batch // d.dp
        yield Strategy(tp=d.tp, pp=d.pp, dp=d.dp, microbatch_size=b,
                       global_batch_size=b * d.dp * STREAM_MICROBATCHES_PER_STAGE * d.pp, schedule="gpipe",
                       mode="inference", precision=record["dtype"], math_fidelity=fidelity)


def tenstorrent_cnn_row(record: dict) -> ValidationRow:
    """tt-metal's CNN table: images/s of ResNet-50 on one card at the stated batch, format and
    fidelity, under the mapping tt-metal runs or, where none expresses it, the fastest legal one
    (:func:`_cnn_candidates`; the suite's SOURCE.md)."""
    model, hardware = load_model(record["model"]), load_hardware(record["preset"])
    samples_per_s, chosen = _best(model, hardware, _cnn_candidates(model, hardware, record))
    return _row("tenstorrent-cnn", f"{record['model']} {record['card']} batch {record['batch']} {record['dtype']} "
                f"{record['math_fidelity']}", "samples/s", float(record["published_samples_per_s"]), samples_per_s,
                _describe(chosen), note=f"target {record['target_samples_per_s']}", group=record["card"])


TT_TRANSFORMERS_STACK = "tt-transformers-performance"
"""The stack of tt-metal's LLM demo rows: its "performance" weight formats, math fidelities and KV cache."""

SERVING_SIMULATED = 4
"""Candidates of a serving row simulated event by event: the fastest by the closed-form estimate."""


def _serving_splits(model: ModelSpec, hardware: Hardware, users: int) -> Iterator[tuple[int, int, str]]:
    """``(tp, pp, attention_split)`` on all the machine's cores, or on one card also a multiple of 8
    of them down to half (130 = 2 x 5 x 13 cores of a p150 admit no split of a 32-head model):
    every legal split (dp 1) by heads and by users."""
    cores = hardware.num_devices
    chips = topology_of(hardware).node_of(cores - 1) + 1
    fewer = range(8 * (cores // 8), cores // 2 - 1, -8) if chips == 1 else ()
    for n in sorted({cores, *fewer}, reverse=True):
        for d in enumerate_degrees(model, hardware, devices=n, global_batch_size=users,
                                   attention_splits=ATTENTION_SPLITS):
            if d.dp == 1 and d.cp == 1:
                yield d.tp, d.pp, d.attention_split


def _serving_candidates(model: ModelSpec, hardware: Hardware, record: dict, stack: Stack) -> Iterator[Strategy]:
    """The :data:`SERVING_SIMULATED` fastest (by the estimate) of every :func:`_serving_splits`
    and placement order, of the row's decode step (all users in one microbatch) or, for
    ``ttft_ms``, of one user's prefill. tt-metal runs each operator over the chip's core grid
    (its decode attention over users and heads): a split by users over all the cores stands for
    it; the fastest expressible mapping is taken, as in PALM Table V."""
    decode = record["metric"] == "tokens_per_s_per_user"
    users = int(record["users"]) if decode else 1
    orders = topology_of(hardware).device_orders()
    ranked = []
    for tp, pp, split in _serving_splits(model, hardware, users):
        for placement in orders:
            strategy = Strategy(tp=tp, pp=pp, microbatch_size=users, global_batch_size=users, mode="inference",
                                precision="bfloat8_b", prompt_length=int(record["prompt_length"]), placement=placement,
                                decode_context_length=int(record["decode_context_length"]) if decode else 0,
                                attention_split=split)
            ranked.append((-estimate_samples_per_s(model, hardware, strategy, stack=stack), len(ranked), strategy))
    yield from (strategy for _, _, strategy in sorted(ranked)[:SERVING_SIMULATED])


def tenstorrent_llm_row(record: dict) -> ValidationRow:
    """tt-metal's LLM table: tokens/s per user of a decode step, or the time to first token, on
    one card or box, fastest legal mapping, under the demo's formats and fidelities (the
    :data:`TT_TRANSFORMERS_STACK`; see the suite's SOURCE.md for what is read how)."""
    model, hardware = load_model(record["model"]), load_hardware(record["preset"])
    stack = load_stack(TT_TRANSFORMERS_STACK)
    _, chosen = _best(model, hardware, _serving_candidates(model, hardware, record, stack), stack)
    latency = simulate(model, hardware, chosen, stack=stack).iteration_time_s if chosen else 0.0
    decode = record["metric"] == "tokens_per_s_per_user"
    predicted = (1 / latency if decode else latency * 1e3) if latency else 0.0
    note = f"{record['release']}" + (f"; {record['note']}" if isinstance(record["note"], str) else "")
    return _row("tenstorrent-llm", f"{record['model']} {record['system']} {record['users'] if decode else 1} users",
                "tokens/s per user" if decode else "TTFT ms", float(record["published"]), predicted,
                _describe(chosen) + (f" {chosen.placement}" if chosen else ""), note=note,
                group="decode" if decode else "prefill")


SUITES: dict[str, tuple[str, Callable[[dict], ValidationRow]]] = {
    "narayanan-table1": ("narayanan-sc21/table1", narayanan_row),
    "narayanan-table2": ("narayanan-sc21/table2", narayanan_row),
    "narayanan-table2-zero3": ("narayanan-sc21/table2-zero3", narayanan_zero3_row),
    "korthikanti-table4": ("korthikanti-mlsys23/table4", korthikanti_layer_row),
    "korthikanti-table5": ("korthikanti-mlsys23/table5", korthikanti_row),
    "palm-table4": ("palm/table4", palm_table4_row),
    "palm-table5": ("palm/table5", palm_table5_row),
    "palm-table5-algorithm-1": ("palm/table5", partial(palm_table5_row, dataflow="palm-algorithm-1")),
    "palm-table7": ("palm/table7", palm_table7_row),
    "palm-table7-tiled": ("palm/table7", partial(palm_table7_row, dataflow="tiled")),
    "tenstorrent-gemm": ("tenstorrent/gemm", tenstorrent_gemm_row),
    "tenstorrent-llm": ("tenstorrent/llm", tenstorrent_llm_row),
    "tenstorrent-cnn": ("tenstorrent/cnn", tenstorrent_cnn_row),
    "megatron-bridge-h100": ("megatron-bridge/h100", megatron_bridge_row),
    "megatron-bridge-h100-moe": ("megatron-bridge/h100-moe", megatron_bridge_moe_row),
    "torchtitan-h100": ("torchtitan/h100", torchtitan_row),
    "trtllm-h100": ("trtllm/h100", trtllm_row),
}
"""Suite name -> (data folder under ``studies/validation``, row function). The ``-algorithm-1`` and
``-tiled`` suites rerun a PALM table under the other mesh dataflow than its preset's."""


def run_suites(names: list[str], data_dir: Path = DATA_DIR, jobs: int = -1) -> list[ValidationRow]:
    """Every row of the named suites (in parallel worker processes).

    Raises:
        InputError: unknown suite name or missing data file.
    """
    from simulator import InputError

    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise InputError(f"validate: unknown suite {unknown[0]!r} (known: {sorted(SUITES)})")
    tasks = []
    for name in names:
        folder, row = SUITES[name]
        path = data_dir / folder / "data.csv"
        if not path.is_file():
            raise InputError(f"validate: {path} does not exist")
        tasks += [(row, {**record, "suite": name, "data": str(path.parent)})
                  for record in pd.read_csv(path).to_dict(orient="records")]
    return Parallel(n_jobs=jobs, backend="loky")(delayed(row)(record) for row, record in tasks)


def _errors(rows: list[ValidationRow]) -> dict[str, Any]:
    """Rows, mean absolute and maximum absolute error of ``rows`` (measured rows only)."""
    errors = [abs(r.error) for r in rows if r.measured]
    return {"rows": len(rows), "mean_abs_error": sum(errors) / len(errors) if errors else None,
            "max_abs_error": max(errors) if errors else None}


def summary(rows: list[ValidationRow]) -> dict[str, dict[str, Any]]:
    """Per suite: rows, mean absolute and maximum absolute error (measured rows only), and the
    same per group where the suite's rows have groups."""
    out = {}
    for suite in dict.fromkeys(r.suite for r in rows):
        mine = [r for r in rows if r.suite == suite]
        groups = {g: _errors([r for r in mine if r.group == g]) for g in dict.fromkeys(r.group for r in mine) if g}
        out[suite] = {**_errors(mine), **({"groups": groups} if groups else {})}
    return out


def to_frame(rows: list[ValidationRow]) -> pd.DataFrame:
    """The rows as a table (one column per field)."""
    return pd.DataFrame([asdict(r) for r in rows])
