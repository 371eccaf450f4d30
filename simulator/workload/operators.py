"""Operators of a model with their FLOPs and bytes on one device, after the tensor-parallel split.

Every :class:`Operator` describes the *forward* pass of *one microbatch* on *one device* of a
tensor-parallel group of ``t`` devices. Shape legend: ``b`` microbatch, ``s`` sequence, ``h``
hidden, ``a`` heads, ``d = h / a`` head size, ``f`` FFN hidden size, ``V`` vocabulary,
``t`` tensor-parallel degree, ``B`` bytes per element of the strategy's precision.

A GEMM of an ``(m, k)`` by ``(k, n)`` product costs ``2 m n k`` flop (PALM Table III, Linear).
Transformer layers are split as Megatron-LM (Shoeybi et al. 2019, §3): QKV and MLP-in GEMMs are
column-parallel, the attention-output projection and MLP-out GEMMs row-parallel, attention heads
are split over ``t``. With sequence parallelism (Korthikanti et al., MLSys'23, §4.2.2) the
element-wise operators outside attention and MLP work on ``s / t`` tokens. Element-wise arithmetic
counts (``flops`` of memory operators) are per-element operation counts of the textbook formulas
and only matter when an operator is compute-bound, which they never are.

ResNet-50 follows He et al. 2016, Table 1 (stride on the first 1x1 convolution of a stage, as
the original; 3.8e9 multiply-adds per 224x224 image), convolutions split over output channels
``k`` (PALM Table III, Conv2 with parallelism ``(1, 1, 1, k)``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from simulator.costs import Collective, CollectiveKind
from simulator.strategy import Strategy
from simulator.workload import tt_conv
from simulator.workload.spec import ModelSpec

OperatorKind = Literal["gemm", "memory", "attention"]

ATTENTION_CORE = frozenset({"attention_scores", "attention_softmax", "attention_dropout", "attention_values"})
"""Operators recomputed by selective recompute (Korthikanti et al., MLSys'23, §4.2.1)."""

_SHARED_EXPERT = frozenset({"shared_expert_gate", "shared_expert_up", "shared_expert_silu_multiply",
                            "shared_expert_out"})
RECOMPUTED_OPERATORS: dict[str, frozenset[str]] = {
    "core_attn": ATTENTION_CORE,
    "layernorm": frozenset({"input_norm", "mlp_norm"}),
    "moe_act": frozenset({"expert_silu_multiply"}),
    "mlp": frozenset({"mlp_in", "gelu", "mlp_out", "mlp_gate", "mlp_up", "silu_multiply"}),
    "moe": frozenset({"router", "router_top_k", "token_permute", "expert_gate", "expert_up", "expert_silu_multiply",
                      "expert_out", "token_unpermute"}) | _SHARED_EXPERT,
    "shared_experts": _SHARED_EXPERT,
    "mla_up_proj": frozenset({"q_up", "kv_up"}),
}
"""The operators each of :data:`simulator.strategy.RECOMPUTE_MODULES` re-runs in the backward
(Megatron-Core ``recompute_modules``: the unfused attention core, the input and pre-MLP norms,
the routed experts' activation, the dense MLP, the MoE layer with its shared experts, the shared
experts, MLA's query and key/value up-projections; a fused attention core keeps no scores and is
not re-run)."""

TOKEN_ID_BYTES = 4
"""Bytes of one token id (int32) read by the embedding lookup."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Operator:
    """One operator's forward pass for one microbatch on one device (after the TP split).

    Attributes:
        name: operator name, unique within its layer (e.g. ``qkv``, ``mlp_out``).
        kind: ``gemm`` (compute-bound candidate), ``memory`` (element-wise, bandwidth-bound) or
            ``attention`` (the fused attention kernel, at its own efficiency).
        flops: arithmetic (flop).
        weight_bytes: parameters read (bytes).
        input_bytes: activations read (bytes).
        output_bytes: activations written (bytes).
        halo_bytes: input rows an image-split convolution needs from its neighbours (bytes;
            0 for everything else).
        gather_bytes: the whole output a channel-split convolution all-gathers (bytes; 0 for
            everything else).
        rows, columns: a GEMM's output shape ``m x n`` (batched GEMMs stack their batch in
            ``rows``); 0 for element-wise operators.
        table_bytes: parameters held but only partly read per microbatch: an embedding table,
            of which a lookup reads the rows of its tokens (counted in ``weight_bytes``). They
            count in the stage's parameters and states, not in its traffic (bytes).
        shared_input: the input is the same on every device of the tensor-parallel group (a
            column-parallel GEMM or channel-split convolution: Megatron splits the weight's
            output columns), so a tiled chip may read it once per group and multicast it.
        executed_fraction: the part of ``flops`` the kernel executes (causal fused attention
            skips the masked half of the scores; a tt-metal convolution executes its tile
            padding too, a fraction above 1; ``flops`` keeps the model's arithmetic).
        fp8: a linear layer's GEMM under precision ``fp8``: Transformer Engine runs it in FP8
            (E4M3 forward, E5M2 gradients, its ``DelayedScaling`` recipe), its operands stored
            and moved in bfloat16 as the cast that feeds it reads them.
        expert: a routed expert's GEMM: its parameters are sharded over the expert-parallel
            group and reduced over the expert-data-parallel one (:func:`moe_mlp`).
        serial_bytes: bytes the kernel moves through the device's SRAM in series with its
            arithmetic, not overlapped with it (tt-metal's convolution tilizes each activation
            block before multiplying it, :func:`simulator.workload.tt_conv.tilize_bytes`).
        l1_only: the operator moves data only within the cores' SRAM (tt-metal's halo op): no
            DRAM traffic in a tiled plan, and no activation held beyond its consumer.
        shared_weight: the weights are the same on every device of the tensor-parallel group
            (an image-split convolution under tt-metal's height sharding, whose weight reader
            multicasts them to the cores), so a tiled chip reads them once per group.
        sharded: its activations stay sharded in the cores' SRAM from the operator before to
            the one after (tt-metal's CNNs run every layer on L1-sharded tensors, ``ttcnn.md``
            "Sharding"): a tiled plan moves only its weights where its input and output fit.
        b_bytes_per_element: bytes of one element of a GEMM's second operand ``B`` (its weights,
            or a decode step's cached keys or values) where a serving stack stores it in a format
            of its own (:mod:`simulator.workload.formats`); 0: the strategy's precision.
        peak_flop_per_s: the peak its serving stack's format and math fidelity give it (flop/s);
            0: the unit's (:func:`simulator.workload.roofline.peak_flop_per_s`).
        tile: the ``(rows, columns)`` output tile of its serving stack's GEMM kernel at its
            rows (:attr:`simulator.stacks.spec.Serving.small_m_gemm_tiles`); None: the hardware's.
        grid: the ``(columns, rows)`` core grid its serving stack runs this GEMM on, whole on
            each chip (:attr:`simulator.stacks.spec.Serving.prefill_gemm_grid_x`,
            :attr:`~simulator.stacks.spec.Serving.decode_gemm_readers_per_dram_port`); None: its
            tensor-parallel group's own dataflow.
        grid_in_dram: whether its input, weights and output live in DRAM on that grid.
        launches: kernels its forward launches (a serving stack's data-movement operations
            around a decode layer's arithmetic, :func:`simulator.workload.formats.data_movement`).
    """

    name: str
    kind: OperatorKind
    flops: float
    weight_bytes: float
    input_bytes: float
    output_bytes: float
    halo_bytes: float = 0.0
    gather_bytes: float = 0.0
    rows: float = 0.0
    columns: float = 0.0
    table_bytes: float = 0.0
    shared_input: bool = False
    executed_fraction: float = 1.0
    fp8: bool = False
    expert: bool = False
    serial_bytes: float = 0.0
    l1_only: bool = False
    shared_weight: bool = False
    sharded: bool = False
    b_bytes_per_element: float = 0.0
    peak_flop_per_s: float = 0.0
    tile: tuple[int, int] | None = None
    grid: tuple[int, int] | None = None
    grid_in_dram: tuple[bool, bool, bool] = (True, True, True)
    launches: int = 1

    @property
    def parameter_bytes(self) -> float:
        """Parameters held (bytes): the table of a lookup, else the weights read."""
        return self.table_bytes or self.weight_bytes


def parameter_count(ops: Sequence[Operator], bytes_per_element: float) -> float:
    """Parameters the operators hold (elements): their parameter bytes over the strategy's
    ``bytes_per_element``, or over their own :attr:`Operator.b_bytes_per_element` where a serving
    stack stores their weights in another format."""
    if not any(op.b_bytes_per_element for op in ops):
        return sum(op.parameter_bytes for op in ops) / bytes_per_element
    return sum(op.parameter_bytes / (op.b_bytes_per_element if op.weight_bytes and op.b_bytes_per_element
                                     else bytes_per_element) for op in ops)


def _gemm(name: str, m: float, n: float, k: float, weight: float, inputs: float, bpe: float, *,
          shared: bool = False, fp8: bool = False) -> Operator:
    """A GEMM ``(m, k) x (k, n)``; ``weight`` and ``inputs`` are element counts; ``shared``: a
    column-parallel one (its input is the same on every device of the TP group); ``fp8``: run
    in FP8 (:attr:`Operator.fp8`)."""
    return Operator(
        name=name, kind="gemm", flops=2.0 * m * n * k,
        weight_bytes=weight * bpe, input_bytes=inputs * bpe, output_bytes=m * n * bpe, rows=m, columns=n,
        shared_input=shared, fp8=fp8,
    )


def _elementwise(name: str, elements: float, flop_per_element: float, bpe: float, *,
                 inputs: int = 1, weight: float = 0.0) -> Operator:
    """An element-wise operator over ``elements`` outputs reading ``inputs`` tensors as large."""
    return Operator(
        name=name, kind="memory", flops=flop_per_element * elements,
        weight_bytes=weight * bpe, input_bytes=inputs * elements * bpe, output_bytes=elements * bpe,
    )


def sequence_length(model: ModelSpec, strategy: Strategy) -> int:
    """Tokens of each sample's sequence: the inference prompt where the strategy sets one
    (:attr:`~simulator.strategy.Strategy.prompt_length`), else the model's ``s``."""
    return strategy.prompt_length or model.sequence_length


def rank_sequence(model: ModelSpec, strategy: Strategy) -> int:
    """Query tokens of each sample one device holds: 1 in a decode step (the new token), else
    ``s / cp`` (context parallelism splits the sequence; :attr:`simulator.strategy.Strategy.cp`)."""
    return 1 if strategy.decoding else sequence_length(model, strategy) // strategy.cp


def tokens_per_sample(model: ModelSpec, strategy: Strategy) -> int:
    """Tokens a pass processes per sample: 1 in a decode step, else the whole sequence."""
    return 1 if strategy.decoding else sequence_length(model, strategy)


def key_length(model: ModelSpec, strategy: Strategy, window: int = 0) -> int:
    """Keys each query attends to: a decode step's context (its KV cache), else the sequence; a
    decode step of a layer windowed to ``window`` tokens (:meth:`ModelSpec.attention_window`)
    only the last ``window`` of its context (a whole sequence's queries meet all its keys, the
    window masking some: :func:`executed_fraction`)."""
    keys = strategy.decode_context_length or sequence_length(model, strategy)
    return min(keys, window) if window and strategy.decoding else keys


def executed_fraction(model: ModelSpec, strategy: Strategy, window: int = 0) -> float:
    """The part of a whole sequence's ``s x s`` query-key products a causal decoder's fused
    attention executes, the kernel skipping masked blocks: half (a query meets itself and the
    ones before it), and under a ``window`` of ``W < s`` tokens ``(W (W + 1) / 2 + (s - W) W) /
    s^2`` (the first ``W`` queries meet ``1 ... W`` keys, the others ``W``: Beltagy et al.,
    "Longformer", arXiv 2004.05150, §3.1, ``O(n w)``); 1 for an encoder or a decode step, whose
    query meets every key it reads (:func:`key_length`)."""
    if not model.is_causal or strategy.decoding:
        return 1.0
    s = sequence_length(model, strategy)
    if not window or window >= s:
        return 0.5
    return (window * (window + 1) / 2.0 + (s - window) * window) / (s * s)


def kv_cache_bytes(model: ModelSpec, strategy: Strategy, bytes_per_element: float | None = None,
                   window: int = 0) -> float:
    """One layer's KV cache of one microbatch on one device (bytes): keys and values of
    :func:`key_length` tokens for each of its ``b`` samples, ``2 b c h_kv / t`` elements
    (``h_kv = h kv_heads / a``, grouped-query attention; Pope et al. MLSys'23 §2.1); under
    multi-head latent attention the ``b c (d_c + d_rope)`` latent, whole on every device of the
    group (:func:`latent_cache_width`). A layer windowed to ``window`` tokens keeps the last
    ``window`` (Mistral 7B, arXiv 2310.06825, §2, "Rolling Buffer Cache"). 0 in training, and
    for an encoder, which keeps no cache. Each element takes ``bytes_per_element`` (a serving
    stack's KV-cache format), by default the strategy's."""
    if strategy.training or not model.is_causal:
        return 0.0
    element = strategy.bytes_per_element if bytes_per_element is None else bytes_per_element
    tokens = key_length(model, strategy)
    tokens = min(tokens, window) if window else tokens
    if model.uses_latent_attention:
        return strategy.microbatch_size * tokens * latent_cache_width(model) * element
    return 2.0 * strategy.microbatch_size * tokens * kv_width(model, strategy) * element


def kv_width(model: ModelSpec, strategy: Strategy) -> float:
    """Width of the keys (and of the values) one device of a tensor-parallel group holds per
    sample: ``h_kv / t``. Split by heads (:attr:`~simulator.strategy.Strategy.attention_split`),
    one head (``h / a``) where ``t`` exceeds the KV heads, each head then replicated on ``t /
    kv_heads`` devices (vLLM ``QKVParallelLinear``: ``num_kv_head_replicas = tp_size //
    total_num_kv_heads``; :func:`simulator.legality.tp_divides`). Split by users, the ``b
    kv_heads`` (sample, KV head) pairs are shared out first, a pair replicated on ``t / (b
    kv_heads)`` devices only beyond them."""
    t = strategy.tp
    if strategy.attention_split == "users":
        return model.kv_hidden_size / t * max(1.0, t / (strategy.microbatch_size * model.kv_heads))
    return model.kv_hidden_size / t if model.kv_heads >= t else model.head_size


def _tokens(model: ModelSpec, strategy: Strategy, shard_elementwise: bool) -> tuple[int, float]:
    """``(b*s, tokens of element-wise ops)``: ``b*s`` (``s`` a context-parallel rank's share),
    divided by ``t`` with sequence parallelism or where the tensor-parallel group's cores split
    element-wise work (``shard_elementwise``)."""
    tokens = strategy.microbatch_size * rank_sequence(model, strategy)
    sharded = strategy.sequence_parallel or shard_elementwise
    return tokens, tokens / strategy.tp if sharded else float(tokens)


def _attention(model: ModelSpec, strategy: Strategy, window: int = 0) -> tuple[Operator, ...]:
    """QKV (``h + 2 h_kv`` outputs: grouped-query attention's keys and values are ``h_kv =
    h kv_heads / a`` wide), the core, output projection. Unfused, the core is scores
    ``(b a/t, s, d) x (b a/t, d, s)``, softmax, dropout and ``x V``, the ``s x s`` scores written
    and read between them. Fused (``strategy.attention == "fused"``), it is one FlashAttention
    kernel (Dao et al., NeurIPS'22; FlashAttention-2, ICLR'24): the same ``4 b s^2 h / t`` flop of
    the two products, reading Q, K, V and writing the output, no scores in memory; a causal
    decoder (GPT, LLaMA) executes half of them, the kernel skipping masked blocks. Under context
    parallelism a device's ``s / cp`` queries meet all ``s`` keys (the ring brings the others'),
    ``1/cp`` of the products, half of them executed in a causal decoder as Megatron-LM's
    balanced chunks give each rank (:func:`simulator.legality.check_workload`). A decode step
    (:attr:`~simulator.strategy.Strategy.decoding`) is one query token per sample against its
    ``c`` cached keys and values, all of which it reads (nothing masked). A layer windowed to
    ``window`` tokens executes :func:`executed_fraction` of a sequence's products and reads the
    last ``window`` cached keys and values in a decode step (:func:`key_length`)."""
    if model.uses_latent_attention:
        return _latent_attention(model, strategy)
    b, s, h, t, bpe = strategy.microbatch_size, rank_sequence(model, strategy), model.hidden_size, strategy.tp, \
        strategy.bytes_per_element
    tokens, kv = b * s, kv_width(model, strategy) * t  # kv / t: a device's share of the keys' width
    bias = 0 if model.architecture == "llama" else 1
    width = model.attention_width
    keys = key_length(model, strategy, window)
    # a decode step reads every cached key and value; a whole sequence computes its own
    cached = b * keys * kv / t if strategy.decoding else tokens * kv / t
    core = _attention_core(model, strategy, _CoreShape(
        queries=tokens * width / t, keys=cached, values=cached, key_head=model.head_size,
        value_head=model.head_size, outputs=tokens * width / t), window)
    projected = kv if strategy.attention_split == "heads" else model.kv_hidden_size
    fp8, qkv = strategy.precision == "fp8", (width + 2 * projected) / t
    return (
        _gemm("qkv", tokens, qkv, h, qkv * h + bias * qkv, tokens * h, bpe, shared=True, fp8=fp8),
        *core,
        _gemm("attention_projection", tokens, h, width / t, h * width / t + bias * h, tokens * width / t, bpe,
              fp8=fp8),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _CoreShape:
    """Elements the attention core of one device reads and writes, and its heads' widths."""

    queries: float
    keys: float
    values: float
    key_head: float
    value_head: float
    outputs: float


def _attention_core(model: ModelSpec, strategy: Strategy, shape: _CoreShape,
                    window: int = 0) -> tuple[Operator, ...]:
    """The attention core of :func:`_attention`: ``b a/t`` heads of ``s`` queries against
    :func:`key_length` keys, ``2 b a/t s c (d_k + d_v)`` flop (``4 b s^2 h / t`` for ``d = h/a``),
    fused (executing :func:`executed_fraction` of them) or unfused (every score computed, the
    mask applied to them)."""
    b, s, t, bpe = strategy.microbatch_size, rank_sequence(model, strategy), strategy.tp, strategy.bytes_per_element
    keys = key_length(model, strategy, window)
    scores = b * (model.num_heads / t) * s * keys
    if strategy.attention == "fused":
        return (Operator(
            name="fused_attention", kind="attention", flops=2.0 * scores * (shape.key_head + shape.value_head),
            weight_bytes=0.0, input_bytes=(shape.queries + shape.keys + shape.values) * bpe,
            output_bytes=shape.outputs * bpe, executed_fraction=executed_fraction(model, strategy, window)),)
    rows = b * (model.num_heads / t) * s
    return (
        _gemm("attention_scores", rows, keys, shape.key_head, 0.0, shape.queries + shape.keys, bpe),
        _elementwise("attention_softmax", scores, 5.0, bpe),
        _elementwise("attention_dropout", scores, 2.0, bpe),
        _gemm("attention_values", rows, shape.value_head, keys, 0.0, scores + shape.values, bpe),
    )


def latent_cache_width(model: ModelSpec) -> int:
    """Elements multi-head latent attention caches per token and layer: the compressed keys and
    values ``d_c`` and the shared rotary key ``d_rope`` (DeepSeek-V2, arXiv 2405.04434, §2.1.2)."""
    return model.kv_lora_rank + model.qk_rope_head_dim


def _latent_attention(model: ModelSpec, strategy: Strategy) -> tuple[Operator, ...]:
    """Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, §2.1, Eqs. 9-19), as
    Megatron-Core's ``MLASelfAttention`` splits it: the down-projections of the queries
    ``(b s, h) x (h, d_q)`` and of the keys and values ``(b s, h) x (h, d_c + d_rope)`` are
    replicated on the tensor-parallel group, each followed by an RMSNorm; the up-projections
    ``(d_q, a/t (d_nope + d_rope))`` and ``(d_c, a/t (d_nope + d_v))`` are column-parallel, the
    output projection ``(a/t d_v, h)`` row-parallel. A decode step attends in the latent space
    (the up-projections absorbed into the query and the output, §2.1.2): heads of width ``d_c +
    d_rope`` for the scores and ``d_c`` for the values, reading the ``d_c + d_rope`` cached latent
    of each key once."""
    b, s, h, t, bpe = strategy.microbatch_size, rank_sequence(model, strategy), model.hidden_size, strategy.tp, \
        strategy.bytes_per_element
    tokens, heads, fp8 = b * s, model.num_heads / t, strategy.precision == "fp8"
    d_qk, d_v, rank_q, rank_kv = model.head_size, model.value_head_size, model.q_lora_rank, model.kv_lora_rank
    if strategy.decoding:
        latent = float(latent_cache_width(model))
        shape = _CoreShape(queries=tokens * heads * latent, keys=b * key_length(model, strategy) * latent,
                           values=0.0, key_head=latent, value_head=float(rank_kv), outputs=tokens * heads * d_v)
    else:
        shape = _CoreShape(queries=tokens * heads * d_qk, keys=tokens * heads * d_qk, values=tokens * heads * d_v,
                           key_head=d_qk, value_head=d_v, outputs=tokens * heads * d_v)
    kv_up = heads * (model.qk_nope_head_dim + d_v)
    if rank_q:
        queries: tuple[Operator, ...] = (
            _gemm("q_down", tokens, rank_q, h, h * rank_q, tokens * h, bpe, fp8=fp8),
            _elementwise("q_norm", tokens * rank_q, 4.0, bpe, weight=rank_q),
            _gemm("q_up", tokens, heads * d_qk, rank_q, rank_q * heads * d_qk, tokens * rank_q, bpe, fp8=fp8))
    else:
        queries = (_gemm("q_proj", tokens, heads * d_qk, h, h * heads * d_qk, tokens * h, bpe, shared=True,
                         fp8=fp8),)
    return (
        *queries,
        _gemm("kv_down", tokens, latent_cache_width(model), h, h * latent_cache_width(model), tokens * h, bpe,
              fp8=fp8),
        _elementwise("kv_norm", tokens * rank_kv, 4.0, bpe, weight=rank_kv),
        _gemm("kv_up", tokens, kv_up, rank_kv, rank_kv * kv_up, tokens * rank_kv, bpe, fp8=fp8),
        *_attention_core(model, strategy, shape),
        _gemm("attention_projection", tokens, h, heads * d_v, heads * d_v * h, tokens * heads * d_v, bpe, fp8=fp8),
    )


def _swiglu(prefix: str, tokens: float, inner: float, h: int, bpe: float, fp8: bool,
            product: str = "") -> tuple[Operator, ...]:
    """A SwiGLU MLP ``(tokens, h) -> (tokens, inner) -> (tokens, h)``: gate and up GEMMs, their
    product (named ``product``, default ``<prefix>_silu_multiply``), the down GEMM ``<prefix>_out``."""
    return (
        _gemm(f"{prefix}_gate", tokens, inner, h, h * inner, tokens * h, bpe, shared=True, fp8=fp8),
        _gemm(f"{prefix}_up", tokens, inner, h, h * inner, tokens * h, bpe, shared=True, fp8=fp8),
        _elementwise(product or f"{prefix}_silu_multiply", tokens * inner, 6.0, bpe, inputs=2),
        _gemm(f"{prefix}_out", tokens, h, inner, inner * h, tokens * inner, bpe, fp8=fp8),
    )


def _mlp(model: ModelSpec, strategy: Strategy) -> tuple[Operator, ...]:
    """MLP: ``(b s, h) x (h, f/t)`` then ``(b s, f/t) x (f/t, h)``; LLaMA gates with SwiGLU."""
    h, bpe = model.hidden_size, strategy.bytes_per_element
    tokens, inner = strategy.microbatch_size * rank_sequence(model, strategy), model.ffn_hidden_size / strategy.tp
    fp8 = strategy.precision == "fp8"
    if model.architecture == "llama":
        return _swiglu("mlp", tokens, inner, h, bpe, fp8, product="silu_multiply")
    return (
        _gemm("mlp_in", tokens, inner, h, h * inner + inner, tokens * h, bpe, shared=True, fp8=fp8),
        _elementwise("gelu", tokens * inner, 8.0, bpe),
        _gemm("mlp_out", tokens, h, inner, inner * h + h, tokens * inner, bpe, fp8=fp8),
    )


def moe_mlp(model: ModelSpec, strategy: Strategy) -> tuple[Operator, ...]:
    """A Mixture-of-Experts MLP on one device (Shazeer et al., ICLR'17; Fedus et al., JMLR'22;
    DeepSeekMoE, Dai et al., ACL'24): the router ``(b s, h) x (h, E)``, replicated on the
    tensor-parallel group as Megatron-Core's ``TopKRouter``; the device's ``E / ep`` routed
    experts (each a SwiGLU of ``h x f_e``, split over the expert tensor-parallel degree ``e``,
    :attr:`~simulator.strategy.Strategy.expert_tp`, ``t`` by default) as grouped GEMMs over the
    ``b s k e / t`` token copies the expert-parallel all-to-all brings them (every device sends
    its ``b s k / t`` and, with balanced routing, receives as many; with ``e > 1`` the expert-TP
    group gathers them: :func:`expert_parallel_collectives`), so the stage's routed flop
    ``2 b s k h f_e`` per replica splits evenly whatever ``e``; and the shared
    experts, a dense SwiGLU of ``n_s f_s`` over the device's own ``b s`` tokens. Around the
    experts run the element-wise kernels of Megatron-Core's token dispatcher
    (``moe_utils.permute`` / ``unpermute``): the router's softmax and top-k over ``b s E``
    scores, the permutation copying each token to its ``k`` slots (``b s k e h / t`` read and
    written), and the un-permutation summing the ``k`` expert outputs of each token weighted by
    its routing probabilities.

    Routed GEMMs carry the balanced ``2 b s k h f_e / t`` flop each; the busiest device executes
    :attr:`~simulator.workload.spec.ModelSpec.expert_load_imbalance` times them
    (:attr:`Operator.executed_fraction`). Each reads the experts its tokens reach (all ``E / ep``
    unless fewer than ``b s k`` copies, a decode step's few tokens) and holds all ``E / ep``
    (:attr:`Operator.table_bytes`)."""
    h, bpe, t = model.hidden_size, strategy.bytes_per_element, strategy.tp
    tokens, fp8 = strategy.microbatch_size * rank_sequence(model, strategy), strategy.precision == "fp8"
    kept = tokens * strategy.expert_tp / t
    copies, local = kept * model.experts_per_token, model.num_experts / strategy.ep
    inner, reached = model.expert_ffn_hidden_size / strategy.expert_tp, min(local, copies)
    routed = tuple(replace(op, weight_bytes=op.weight_bytes * reached, table_bytes=op.weight_bytes * local,
                           executed_fraction=model.expert_load_imbalance, expert=True) if op.kind == "gemm" else op
                   for op in _swiglu("expert", copies, inner, h, bpe, fp8))
    shared = model.num_shared_experts * model.shared_expert_size / t
    k = model.experts_per_token
    return (
        _gemm("router", tokens, model.num_experts, h, h * model.num_experts, tokens * h, bpe),
        _elementwise("router_top_k", tokens * model.num_experts, 5.0, bpe),
        _elementwise("token_permute", copies * h, 1.0, bpe),
        *routed,
        _elementwise("token_unpermute", kept * h, 2.0 * k, bpe, inputs=k),
        *(_swiglu("shared_expert", tokens, shared, h, bpe, fp8) if shared else ()),
    )


def expert_parallel_collectives(model: ModelSpec, strategy: Strategy) -> tuple[Collective, ...]:
    """Expert parallelism's token dispatch and combine in one pass of a Mixture-of-Experts
    layer: two all-to-alls over the ``ep`` group, each of ``b s k h / t`` elements per device
    (its ``b s / t`` tokens' share of the tensor-parallel group, each copied to its ``k``
    experts), which send ``(ep - 1) / ep`` of it to the other ranks (Megatron-Core
    ``MoEAlltoAllTokenDispatcher``; Lepikhin et al., "GShard", ICLR'21, §2.2). The backward
    runs the same two with the gradients. Balanced routing (what each rank sends, it
    receives). The volume does not depend on the expert tensor-parallel degree: each rank
    dispatches its own sequence-parallel share, and with ``etp > 1`` the expert-TP group then
    all-gathers the received copies (:func:`transformer_layer_collectives`). Empty when
    ``ep == 1``."""
    if strategy.ep == 1:
        return ()
    size = (strategy.microbatch_size * rank_sequence(model, strategy) * model.experts_per_token * model.hidden_size
            * strategy.bytes_per_element / strategy.tp)
    return (Collective(kind="all_to_all", size_bytes=size, count=2),)


def transformer_layer(model: ModelSpec, strategy: Strategy, *, shard_elementwise: bool = False,
                      moe: bool = False, window: int = 0) -> tuple[Operator, ...]:
    """Operators of one transformer layer, forward, one microbatch, one device.

    Pre-norm order (GPT-2/Megatron): layernorm, attention ``(b, s, h) -> (b, s, h)``, dropout +
    residual add, layernorm, MLP, dropout + residual add; each dropout + residual add is one fused
    element-wise kernel reading two tensors and writing one, as Megatron-LM generates them
    ("bias + dropout + add", Narayanan et al. SC'21 §4.2). GEMM flops sum to
    ``(24 b s h^2 + 4 b s^2 h) / t`` for ``f = 4h`` (PALM Table III, Transformer row).
    LLaMA uses RMSNorm (``h`` weights, no bias) and a SwiGLU MLP of three GEMMs; BERT is
    treated as GPT (same operators, post-norm order does not change costs).

    Args:
        model: the transformer's shapes.
        strategy: ``tp``, ``microbatch_size``, ``sequence_parallel`` and ``precision`` are used.
        shard_elementwise: the norms and dropout-residuals are split over the tensor-parallel
            group without sequence parallelism, as the cores of a tiled chip split every
            element-wise operator over the grid (tt-metal shards them like its matmuls); their
            input, which every core of the group holds after the all-reduce, is read ``1/t``
            per core. Megatron on GPUs replicates them instead (Korthikanti et al. §4.2.2).
        moe: a Mixture-of-Experts layer: :func:`moe_mlp` replaces the MLP.
        window: tokens its attention's queries attend to at most (0: the whole context;
            :meth:`~simulator.workload.spec.ModelSpec.attention_window`).

    Returns:
        The layer's operators in execution order.
    """
    bpe = strategy.bytes_per_element
    _, tokens = _tokens(model, strategy, shard_elementwise)
    h = model.hidden_size
    norm_weight = h if model.architecture == "llama" else 2 * h
    norm = 4.0 if model.architecture == "llama" else 5.0
    return (
        _elementwise("input_norm", tokens * h, norm, bpe, weight=norm_weight),
        *_attention(model, strategy, window),
        _elementwise("attention_dropout_residual", tokens * h, 3.0, bpe, inputs=2),
        _elementwise("mlp_norm", tokens * h, norm, bpe, weight=norm_weight),
        *(moe_mlp(model, strategy) if moe else _mlp(model, strategy)),
        _elementwise("mlp_dropout_residual", tokens * h, 3.0, bpe, inputs=2),
    )


def embedding(model: ModelSpec, strategy: Strategy, *, shard_elementwise: bool = False) -> tuple[Operator, ...]:
    """Vocabulary-parallel embedding lookup ``(b, s) -> (b, s, h)`` (+ positions, dropout).

    The word table ``(V/t, h)`` is split over ``t`` (Megatron ``VocabParallelEmbedding``); GPT and
    BERT add a learned position table ``(s, h)`` (replicated); LLaMA has rotary positions (no
    table). The lookup reads its token ids and the rows they select: ``b s / t`` rows of ``h`` on
    average per device (tokens spread over the ``t`` vocabulary shards), not the whole table.
    """
    b, s, h = strategy.microbatch_size, rank_sequence(model, strategy), model.hidden_size
    bpe = strategy.bytes_per_element
    tokens, elementwise_tokens = _tokens(model, strategy, shard_elementwise)
    positions = 0 if model.architecture == "llama" else model.sequence_length * h
    return (
        Operator(name="word_embedding", kind="memory", flops=0.0,
                 weight_bytes=min(tokens, model.vocab_size) * h / strategy.tp * bpe,
                 table_bytes=model.vocab_size * h / strategy.tp * bpe,
                 input_bytes=b * s * TOKEN_ID_BYTES, output_bytes=tokens * h * bpe),
        _elementwise("position_embedding", tokens * h, 1.0, bpe, weight=positions),
        _elementwise("embedding_dropout", elementwise_tokens * h, 2.0, bpe),
    )


def logits(model: ModelSpec, strategy: Strategy, *, shard_elementwise: bool = False) -> tuple[Operator, ...]:
    """Final norm, logits GEMM ``(b s, h) x (h, V/t)`` (``2 b s h V / t`` flop), softmax/cross-entropy.

    The logits weights are the embedding table (tied) for GPT and BERT, a separate table for
    LLaMA; either way ``V h / t`` of them are read on the last stage. A classification head
    (:attr:`ModelSpec.num_classes`) replaces it: :func:`classification_head`.
    """
    if model.num_classes:
        return classification_head(model, strategy)
    bpe, h = strategy.bytes_per_element, model.hidden_size
    tokens, elementwise_tokens = _tokens(model, strategy, shard_elementwise)
    vocab = model.vocab_size / strategy.tp
    norm_weight = h if model.architecture == "llama" else 2 * h
    return (
        _elementwise("final_norm", elementwise_tokens * h, 5.0, bpe, weight=norm_weight),
        _gemm("logits", tokens, vocab, h, vocab * h, tokens * h, bpe, shared=True),
        _elementwise("cross_entropy", tokens * vocab, 5.0, bpe),
    )


def classification_head(model: ModelSpec, strategy: Strategy) -> tuple[Operator, ...]:
    """BERT's sequence-classification head on the first token of each of the ``b`` samples
    (Devlin et al. 2019, §4.1; Hugging Face ``BertPooler`` and ``BertForSequenceClassification``):
    pooler GEMM ``(b, h) x (h, h)`` with bias, tanh, classifier GEMM ``(b, h) x (h, C)`` with
    bias, softmax/cross-entropy over ``C`` classes. Replicated on the tensor-parallel group (its
    ``h^2 + h C`` weights are under 1% of BERT-base's), so it needs no collective."""
    b, h, classes = strategy.microbatch_size, model.hidden_size, model.num_classes
    bpe = strategy.bytes_per_element
    return (
        _gemm("pooler", b, h, h, h * h + h, b * h, bpe),
        _elementwise("pooler_tanh", b * h, 5.0, bpe),
        _gemm("classifier", b, classes, h, h * classes + classes, b * h, bpe),
        _elementwise("cross_entropy", b * classes, 5.0, bpe),
    )


def transformer_layer_collectives(model: ModelSpec, strategy: Strategy, moe: bool = False) -> tuple[Collective, ...]:
    """TP collectives of one layer's forward (PALM Table III, Transformer row; Megatron §3).

    Two all-reduces of ``b s h`` elements (after attention and after the MLP); with sequence
    parallelism two all-gathers and two reduce-scatters of the same size instead (Korthikanti
    et al., MLSys'23, §4.2.2). The backward pass has the same collectives (the conjugate
    operators); a full-recompute forward repeats the forward's. Empty when ``t == 1``.

    A Mixture-of-Experts layer (``moe``) under sequence parallelism (which Megatron-Core
    requires with expert and tensor parallelism together) dispatches each rank's own ``b s / t``
    tokens to the all-to-all, so of the ``b s h`` pairs only the attention's remains, and the
    shared experts' if it has them (``SharedExpertMLP`` is tensor-parallel over ``t``); with
    expert tensor parallelism ``etp > 1`` (``etp = t``: the TP group) the expert-TP group then
    all-gathers the ``b s k etp / t`` token copies its experts take and reduce-scatters their
    outputs (Megatron-Core ``MoEAlltoAllTokenDispatcher``: ``gather_from_sequence_parallel_region``
    after the all-to-all, ``reduce_scatter_to_sequence_parallel_region`` before the combine).
    """
    if strategy.tp == 1:
        return ()
    size = strategy.microbatch_size * rank_sequence(model, strategy) * model.hidden_size * strategy.bytes_per_element
    if not strategy.sequence_parallel:
        return (Collective(kind="all_reduce", size_bytes=size, count=2),)
    if not moe:
        return (Collective(kind="all_gather", size_bytes=size, count=2),
                Collective(kind="reduce_scatter", size_bytes=size, count=2))
    pairs = 2 if model.num_shared_experts else 1
    copies = size * model.experts_per_token * strategy.expert_tp / strategy.tp
    experts = ((Collective(kind="all_gather", size_bytes=copies), Collective(kind="reduce_scatter", size_bytes=copies))
               if strategy.expert_tp > 1 else ())
    return (Collective(kind="all_gather", size_bytes=size, count=pairs),
            Collective(kind="reduce_scatter", size_bytes=size, count=pairs), *experts)


def context_parallel_collectives(model: ModelSpec, strategy: Strategy, backward: bool) -> tuple[Collective, ...]:
    """Context-parallel collectives of one layer's attention over the ``cp`` group: the forward
    gathers every rank's keys and values (``2 b s h_kv / t`` elements of the whole sequence), the
    backward gathers them again and reduce-scatters their gradients. Ring attention moves
    exactly these bytes as ``cp - 1`` ring steps, each overlapped with a block of attention
    (Liu et al., ICLR'24, §3; Megatron-LM context parallelism); Llama 3 all-gathers them
    (Dubey et al. 2024, §3.3.2). Under multi-head latent attention the keys and values are the
    up-projected ``a/t (d_qk + d_v)`` wide ones (Megatron-Core's MLA runs context parallelism on
    them). Empty when ``cp == 1``."""
    if strategy.cp == 1:
        return ()
    size = 2.0 * strategy.microbatch_size * sequence_length(model, strategy) * kv_width(model, strategy) \
        * strategy.bytes_per_element
    if model.uses_latent_attention:
        size = strategy.microbatch_size * sequence_length(model, strategy) * model.num_heads / strategy.tp \
            * (model.head_size + model.value_head_size) * strategy.bytes_per_element
    kinds: tuple[CollectiveKind, ...] = ("all_gather", "reduce_scatter") if backward else ("all_gather",)
    return tuple(Collective(kind=kind, size_bytes=size) for kind in kinds)


def embedding_collectives(model: ModelSpec, strategy: Strategy) -> tuple[Collective, ...]:
    """Forward TP collective of the vocabulary-parallel embedding: sum of partial lookups.

    One all-reduce of ``b s h`` elements (a reduce-scatter with sequence parallelism), Megatron
    ``VocabParallelEmbedding``; nothing in the backward. Empty when ``t == 1``.
    """
    if strategy.tp == 1:
        return ()
    size = strategy.microbatch_size * rank_sequence(model, strategy) * model.hidden_size * strategy.bytes_per_element
    kind: CollectiveKind = "reduce_scatter" if strategy.sequence_parallel else "all_reduce"
    return (Collective(kind=kind, size_bytes=size, count=1),)


def logits_collectives(model: ModelSpec, strategy: Strategy) -> tuple[Collective, ...]:
    """Forward TP collectives of the vocabulary-parallel cross-entropy (Megatron).

    Three all-reduces of ``b s`` fp32 values (max logit, sum of exponentials, target logit);
    with sequence parallelism also one all-gather of the ``b s h`` input of the logits GEMM.
    Empty when ``t == 1`` or under a classification head (replicated, :func:`classification_head`).
    """
    if strategy.tp == 1 or model.num_classes:
        return ()
    tokens = strategy.microbatch_size * rank_sequence(model, strategy)
    reductions = (Collective(kind="all_reduce", size_bytes=tokens * 4.0, count=3),)
    if not strategy.sequence_parallel:
        return reductions
    size = tokens * model.hidden_size * strategy.bytes_per_element
    return (Collective(kind="all_gather", size_bytes=size, count=1), *reductions)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnitCollectives:
    """Tensor-parallel collectives of one unit per microbatch: its forward, its backward, and
    the forward's again when the backward recomputes it; its context-parallel ones, forward
    and backward, which its attention's compute hides; and a Mixture-of-Experts layer's
    expert-parallel all-to-alls of one pass (the same in the forward, the backward and a full
    recompute's forward)."""

    forward: tuple[Collective, ...] = ()
    backward: tuple[Collective, ...] = ()
    recompute: tuple[Collective, ...] = ()
    context_forward: tuple[Collective, ...] = ()
    context_backward: tuple[Collective, ...] = ()
    expert: tuple[Collective, ...] = ()


def layer_collectives(model: ModelSpec, strategy: Strategy, moe: bool) -> UnitCollectives:
    """Every collective of one transformer layer, dense or Mixture-of-Experts (``moe``): its TP
    collectives in the forward, the backward and a full recompute's forward
    (:func:`transformer_layer_collectives`), its context-parallel ones
    (:func:`context_parallel_collectives`) and its expert-parallel all-to-alls
    (:func:`expert_parallel_collectives`)."""
    collectives = transformer_layer_collectives(model, strategy, moe)
    return UnitCollectives(
        forward=collectives, backward=collectives,
        recompute=collectives if strategy.recompute == "full" else (),
        context_forward=context_parallel_collectives(model, strategy, backward=False),
        context_backward=context_parallel_collectives(model, strategy, backward=True),
        expert=expert_parallel_collectives(model, strategy) if moe else ())


def boundary_bytes(model: ModelSpec, strategy: Strategy) -> float:
    """Stage-boundary activation of a transformer per device: ``b s h B / t``.

    Megatron's scatter/gather optimisation sends ``1/t`` per device and all-gathers on arrival
    (Narayanan et al. SC'21 §4.1); the same size with sequence parallelism; ``s`` is a
    context-parallel rank's share.
    """
    return (strategy.microbatch_size * rank_sequence(model, strategy) * model.hidden_size
            * strategy.bytes_per_element / strategy.tp)


# ResNet-50 ------------------------------------------------------------------------------------

RESNET50_STAGES: tuple[tuple[int, int, int], ...] = ((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2))
"""(bottleneck blocks, width, stride of the first block) of conv2_x..conv5_x (He et al. Table 1)."""

RESNET50_UNITS = 2 + sum(blocks for blocks, _, _ in RESNET50_STAGES)
"""Units of ResNet-50: stem, 16 bottleneck blocks, head."""

RESNET50_EXPANSION = 4
"""Output channels of a bottleneck block = 4 x its width (He et al. 2016, Table 1)."""


def _conv(name: str, batch: int, size_in: int, c_in: int, c_out: int, kernel: int, stride: int,
          strategy: Strategy, tt_metal: bool = False) -> tuple[tuple[Operator, ...], int]:
    """A convolution + batch norm + ReLU split over the TP group; returns ops, output size.

    PALM Table III lets each operator be split over the image (``i``) or the output channels
    (``k``). Each convolution takes the split that divides its larger operand: the image when
    its input activations outweigh its weights (early layers), else the output channels (late
    layers), as a tiled-accelerator mapping keeps the per-device footprint small.

    * image (``i``): every device holds all ``R S C K`` weights and ``1/t`` of the positions; a
      ``R x R`` kernel needs ``R - 1`` input rows of width ``size_in`` from its neighbours
      (:attr:`Operator.halo_bytes`).
    * channels (``k``): every device holds ``K/t`` filters and the whole input; the output
      slices are all-gathered (:attr:`Operator.gather_bytes`, the whole output).

    With ``tt_metal`` (hardware that runs tt-metal's kernels) the convolution is the implicit
    GEMM of :mod:`simulator.workload.tt_conv`: the image split is its height sharding, the
    channel split its width sharding (an image split's weights are multicast to the group,
    :attr:`Operator.shared_weight`); it executes its device's tile-padded GEMM
    (:attr:`Operator.executed_fraction`), tilizes its im2col activations in series
    (:attr:`Operator.serial_bytes`) and, unless it is a plain matmul, is preceded by the halo op
    (an :attr:`Operator.l1_only` copy of its input shard into a padded buffer).
    """
    size_out = size_in // stride
    t, bpe = strategy.tp, strategy.bytes_per_element
    inputs, weights = batch * size_in * size_in * c_in, kernel * kernel * c_in * c_out
    positions = batch * size_out * size_out
    image_split = t == 1 or inputs >= weights
    if image_split:
        conv = _gemm(name, positions / t, c_out, kernel * kernel * c_in, weights, inputs / t, bpe)
        halo = (kernel - 1) * batch * size_in * c_in * bpe if t > 1 else 0.0
        conv = replace(conv, halo_bytes=halo)
    else:
        conv = _gemm(name, positions, c_out / t, kernel * kernel * c_in, weights / t, inputs, bpe, shared=True)
        conv = replace(conv, gather_bytes=positions * c_out * bpe)
    norm = _elementwise(f"{name}_bn_relu", positions * c_out / t, 5.0, bpe, weight=2 * c_out / t)
    if not tt_metal:
        return (conv, norm), size_out
    conv = replace(conv, shared_weight=image_split and t > 1)
    return (*_tt_metal_conv(conv, c_in, kernel, stride, size_in, bpe), norm), size_out


def _tt_metal_conv(conv: Operator, c_in: int, kernel: int, stride: int, size_in: int,
                   bpe: float) -> tuple[Operator, ...]:
    """``conv`` as tt-metal runs it (:mod:`simulator.workload.tt_conv`): its padded implicit
    GEMM and serial tilize, after the halo op unless it is a plain matmul. The halo's buffer
    holds the input shard's sticks at the aligned channel count with ``kernel // 2`` padding
    sticks on each side of every image row and column."""
    gemm = tt_conv.implicit_gemm(conv.rows, c_in, conv.columns, kernel, stride)
    conv = replace(conv, executed_fraction=gemm.flops / gemm.logical_flops,
                   serial_bytes=tt_conv.tilize_bytes(gemm, kernel, stride, bpe))
    if tt_conv.is_matmul(kernel, stride):
        return (conv,)
    padded = ((size_in + 2 * (kernel // 2)) / size_in) ** 2 * tt_conv.aligned_channels(c_in, kernel, stride) / c_in
    halo = Operator(name=f"{conv.name}_halo", kind="memory", flops=0.0, weight_bytes=0.0,
                    input_bytes=conv.input_bytes, output_bytes=conv.input_bytes * padded, l1_only=True)
    return (halo, conv)


def _bottleneck(index: int, width: int, stride: int, c_in: int, size: int,
                strategy: Strategy, tt_metal: bool) -> tuple[Operator, ...]:
    """One bottleneck: 1x1 (stride), 3x3, 1x1 expand; projection shortcut when shapes change."""
    b, name, c_out = strategy.microbatch_size, f"block{index}", width * RESNET50_EXPANSION
    first, size1 = _conv(f"{name}_conv1", b, size, c_in, width, 1, stride, strategy, tt_metal)
    second, _ = _conv(f"{name}_conv2", b, size1, width, width, 3, 1, strategy, tt_metal)
    third, _ = _conv(f"{name}_conv3", b, size1, width, c_out, 1, 1, strategy, tt_metal)
    shortcut: tuple[Operator, ...] = ()
    if stride != 1 or c_in != c_out:
        shortcut, _ = _conv(f"{name}_projection", b, size, c_in, c_out, 1, stride, strategy, tt_metal)
    add = _elementwise(f"{name}_residual", b * size1 * size1 * c_out / strategy.tp, 2.0,
                       strategy.bytes_per_element, inputs=2)
    return (*first, *second, *third, *shortcut, add)


def resnet50_units(model: ModelSpec, strategy: Strategy, *,
                   tt_metal: bool = False) -> list[tuple[str, tuple[Operator, ...]]]:
    """ResNet-50 as 18 units: stem, 16 bottleneck blocks, head (He et al. 2016, Table 1).

    Input ``(b, 3, I, I)`` with ``I = model.image_size``. Stem: 7x7/2 conv to 64 channels, batch
    norm + ReLU, 3x3/2 max pool. Blocks of conv2_x..conv5_x, widths 64..512, outputs 4x width.
    Head: global average pool, fully connected ``2048 -> V`` (``V`` classes). Convolutions split
    each image spatially over the TP group (PALM Table III, Conv2 over ``i``, see :func:`_conv`);
    the pooled vector is all-reduced and the FC layer split over classes. ``tt_metal``: each
    convolution as tt-metal computes it (see :func:`_conv`), every operator
    :attr:`Operator.sharded`.

    Returns:
        ``(unit name, operators)`` in model order.
    """
    b, bpe, t = strategy.microbatch_size, strategy.bytes_per_element, strategy.tp
    stem, size = _conv("stem_conv", b, model.image_size, 3, 64, 7, 2, strategy, tt_metal)
    pooled = size // 2
    pool = _elementwise("stem_maxpool", b * pooled * pooled * 64 / t, 9.0, bpe, inputs=4)
    units: list[tuple[str, tuple[Operator, ...]]] = [("stem", (*stem, pool))]
    c_in, size, index = 64, pooled, 0
    for blocks, width, stride in RESNET50_STAGES:
        for block in range(blocks):
            first_stride = stride if block == 0 else 1
            units.append((f"block{index}", _bottleneck(index, width, first_stride, c_in, size, strategy, tt_metal)))
            c_in, size, index = width * RESNET50_EXPANSION, size // first_stride, index + 1
    pooled_inputs = b * c_in * size * size
    avgpool = Operator(name="avgpool", kind="memory", flops=pooled_inputs / t, weight_bytes=0.0,
                       input_bytes=pooled_inputs * bpe / t, output_bytes=b * c_in * bpe)
    fc = _gemm("fc", b, model.vocab_size / t, c_in, c_in * model.vocab_size / t + model.vocab_size / t,
               b * c_in, bpe, shared=True)
    units.append(("head", (avgpool, fc)))
    if tt_metal:
        return [(name, tuple(replace(op, sharded=True) for op in ops)) for name, ops in units]
    return units


def convolution_collectives(ops: tuple[Operator, ...], strategy: Strategy) -> tuple[
        tuple[Collective, ...], tuple[Collective, ...]]:
    """``(forward, backward)`` TP collectives of a ResNet-50 unit (PALM Table III, Conv2).

    Image-split convolutions (see :func:`_conv`) exchange halo rows forward and backward (timed
    as an all-to-all of :attr:`Operator.halo_bytes` per device) and all-reduce their weight
    gradients (every device holds all weights). Channel-split ones all-gather their output
    forward and all-reduce their input gradient backward. The head all-reduces the pooled
    ``b x C`` vector. Empty when ``t == 1``.
    """
    if strategy.tp == 1:
        return (), ()
    forward: list[Collective] = []
    backward: list[Collective] = []
    for op in ops:
        if op.halo_bytes:
            forward.append(Collective(kind="all_to_all", size_bytes=op.halo_bytes))
            backward += [Collective(kind="all_to_all", size_bytes=op.halo_bytes),
                         Collective(kind="all_reduce", size_bytes=op.weight_bytes)]
        elif op.gather_bytes:
            forward.append(Collective(kind="all_gather", size_bytes=op.gather_bytes))
            backward.append(Collective(kind="all_reduce", size_bytes=op.input_bytes))
        elif op.kind == "gemm" and op.name not in ("fc",):
            backward.append(Collective(kind="all_reduce", size_bytes=op.weight_bytes))
        if op.name == "avgpool":
            forward.append(Collective(kind="all_reduce", size_bytes=op.output_bytes))
    return tuple(forward), tuple(backward)


# A training stack's kernels ------------------------------------------------------------------

ELEMENTWISE_OPERATORS: dict[str, str] = {
    "input_norm": "norm", "mlp_norm": "norm", "final_norm": "final_norm", "silu_multiply": "swiglu",
    "attention_dropout_residual": "residual", "mlp_dropout_residual": "residual", "rope": "rope",
    "cross_entropy": "cross_entropy"}
"""The element-wise class (:data:`simulator.stacks.spec.ELEMENTWISE_CLASSES`) of each operator
of a LLaMA layer, its embedding and its logits, by name."""

ROPE_FLOP_PER_ELEMENT = 6.0
"""A rotary embedding's arithmetic per rotated element: one complex multiply per pair (4 products,
2 sums) over two elements, plus the casts (Su et al., RoFormer, arXiv 2104.09864, Eq. 34)."""


def with_traffic(ops: tuple[Operator, ...], model: ModelSpec, strategy: Strategy,
                 bytes_per_element: Callable[[str], float | None]) -> tuple[Operator, ...]:
    """``ops`` with the HBM traffic a training stack's kernels move: each element-wise operator
    of a class :data:`ELEMENTWISE_OPERATORS` names and ``bytes_per_element`` prices (bytes per
    output element of one forward; None keeps the operator) moves that many bytes per output
    element; where ``rope`` is priced the rotary embedding of the ``b s (h + h_kv) / t`` query
    and key elements follows ``qkv`` in a model with rotary positions (LLaMA's; GPT and BERT
    learn a position table) (:func:`rope`). Every operator else is unchanged."""
    rope_bytes = bytes_per_element("rope") if model.architecture == "llama" else None
    out: list[Operator] = []
    for op in ops:
        price = bytes_per_element(ELEMENTWISE_OPERATORS.get(op.name, "")) if op.kind == "memory" else None
        out.append(op if price is None else _priced(op, op.output_bytes / strategy.bytes_per_element, price))
        if op.name == "qkv" and rope_bytes is not None:
            out.append(rope(model, strategy, rope_bytes))
    return tuple(out)


def rope(model: ModelSpec, strategy: Strategy, bytes_per_element: float) -> Operator:
    """The rotary embedding (Su et al., RoFormer, Eq. 34) of a layer's ``b s h / t`` queries and
    ``b s h_kv / t`` keys on one device, moving ``bytes_per_element`` per rotated element."""
    elements = strategy.microbatch_size * rank_sequence(model, strategy) * (
        model.attention_width / strategy.tp + kv_width(model, strategy))
    return _priced(_elementwise("rope", elements, ROPE_FLOP_PER_ELEMENT, strategy.bytes_per_element), elements,
                   bytes_per_element)


def _priced(op: Operator, elements: float, bytes_per_element: float) -> Operator:
    """``op`` moving ``bytes_per_element`` per output element in all (its weights, then the rest
    as reads beside its output)."""
    return replace(op, input_bytes=max(0.0, elements * bytes_per_element - op.output_bytes - op.weight_bytes))


def alternate_matmuls(ops: tuple[Operator, ...], model: ModelSpec, strategy: Strategy) -> tuple[Operator, ...]:
    """What torchtitan's per-op selective checkpointing re-runs in a layer's backward
    (pytorch/torchtitan ``parallelize_llama.py`` @9dec370 L214-265, ``_save_list`` and
    ``_custom_policy``: every ``aten.mm`` output is saved "except every second mm", counted per
    layer in execution order; the flash-attention output and the reduce-scatter output are
    saved; every other operator is recomputed): the projections ``wq wk wv wo w1 w3 w2`` of a
    LLaMA layer (``model.py`` @9dec370 L189, L253) recompute ``wk``, ``wo`` and ``w3``, the
    key part ``h_kv / (h + 2 h_kv)`` of the fused ``qkv``; and every element-wise operator but
    the layer's last (its output is the next layer's input, saved there). Weighted GEMMs other
    than ``qkv`` count as one projection each."""
    projections: list[tuple[Operator, float]] = []
    for op in ops:
        if op.name == "qkv":
            queries = model.attention_width / strategy.tp
            keys = (op.columns - queries) / 2.0
            projections += [(op, share / op.columns) for share in (queries, keys, keys)]
        elif op.kind == "gemm" and op.weight_bytes:
            projections.append((op, 1.0))
    gemms = [_part(op, share) for index, (op, share) in enumerate(projections) if index % 2 == 1]
    elementwise = [op for op in ops[:-1] if op.kind == "memory"]
    return (*elementwise, *gemms)


def _part(op: Operator, share: float) -> Operator:
    """The ``share`` of a GEMM's output columns: its flops, weights and output in proportion."""
    if share == 1.0:
        return op
    return replace(op, flops=op.flops * share, weight_bytes=op.weight_bytes * share,
                   output_bytes=op.output_bytes * share, columns=op.columns * share)
