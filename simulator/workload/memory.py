"""Per-device memory: weights, gradients, optimizer states, stashed activations (bytes).

Model states per parameter follow Rajbhandari et al., ZeRO, SC'20, §3.1: mixed-precision Adam
keeps 2 (16-bit weights) + 2 (16-bit gradients) + 12 (fp32 master weights 4, momentum 4,
variance 4) = 16 bytes. SGD (no momentum, as PALM Table II) keeps 2 + 2 + 4 (fp32 master
weights only). In fp32 there are no separate master weights: 4 + 4 + 8 (Adam) or 4 + 4 + 0 (SGD).
ZeRO stages 1/2/3 shard optimizer states / + gradients / + weights over ``dp`` (same paper,
§5). Inference keeps weights only (no KV cache: each microbatch is one full forward).

Activations per transformer layer follow Korthikanti et al., "Reducing Activation Recomputation
in Large Transformer Models", MLSys'23, §4 (16-bit activations; see
:func:`layer_activation_bytes` for the other precisions).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.strategy import Strategy
from simulator.workload.operators import rank_sequence
from simulator.workload.spec import ModelSpec

MASTER_WEIGHT_BYTES = 4
"""fp32 master copy kept by mixed-precision training (Micikevicius et al., ICLR'18)."""

ADAM_MOMENT_BYTES = 8
"""Adam's two fp32 moments per parameter (Kingma & Ba 2015; ZeRO §3.1)."""

CROSS_ENTROPY_BYTES = 4
"""fp32 logits kept for the cross-entropy backward (Korthikanti et al., MLSys'23, §4.3)."""

FP8_WEIGHT_COPY_BYTES = 2
"""Bytes per FP8-GEMM parameter of the FP8 weight and its transpose that Transformer Engine
caches across a step's microbatches (Hopper's FP8 GEMM takes only the TN layout, so both are
kept): TE ``pytorch/module/linear.py`` (``weight_fp8``, ``weight_t_fp8``, refreshed when
``is_first_microbatch``), which Megatron-LM's ``TELinear`` passes; TE "Performance
considerations", "Memory usage": the weight stays in high precision beside its FP8 copy."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StateBytes:
    """Bytes of model state per parameter, before ZeRO sharding.

    Attributes:
        weights_bytes: working-precision weights.
        gradients_bytes: working-precision gradients (0 for inference).
        optimizer_bytes: fp32 master weights (mixed precision) + optimizer moments (0 for inference).
    """

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float

    @property
    def total_bytes(self) -> float:
        """Weights + gradients + optimizer states per parameter."""
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes


def has_master_weights(strategy: Strategy) -> bool:
    """True when training keeps a separate fp32 master copy (any precision below fp32)."""
    return strategy.training and strategy.bytes_per_element < MASTER_WEIGHT_BYTES


def state_bytes_per_parameter(strategy: Strategy) -> StateBytes:
    """Model-state bytes per parameter (ZeRO §3.1): Adam fp16 2 + 2 + 12, SGD fp16 2 + 2 + 4."""
    bpe = strategy.bytes_per_element
    if not strategy.training:
        return StateBytes(weights_bytes=bpe, gradients_bytes=0.0, optimizer_bytes=0.0)
    moments = ADAM_MOMENT_BYTES if strategy.optimizer == "adam" else 0
    master = MASTER_WEIGHT_BYTES if has_master_weights(strategy) else 0
    return StateBytes(weights_bytes=bpe, gradients_bytes=bpe, optimizer_bytes=master + moments)


@dataclass(frozen=True, slots=True, kw_only=True)
class StateSharding:
    """Model-state bytes per parameter (:func:`state_bytes_per_parameter`) and the ranks ZeRO
    shards each of them over (1: held whole), as :func:`state_sharding` gives them."""

    per_parameter: StateBytes
    weights_shards: int
    gradients_shards: int
    optimizer_shards: int

    def of(self, parameters: float) -> StateBytes:
        """Model-state bytes of one device holding ``parameters``."""
        weights, gradients, optimizer = self.bytes_of(parameters)
        return StateBytes(weights_bytes=weights, gradients_bytes=gradients, optimizer_bytes=optimizer)

    def bytes_of(self, parameters: float) -> tuple[float, float, float]:
        """:meth:`of` as (weights, gradients, optimizer states) bytes."""
        per = self.per_parameter
        return (parameters * per.weights_bytes / self.weights_shards,
                parameters * per.gradients_bytes / self.gradients_shards,
                parameters * per.optimizer_bytes / self.optimizer_shards)


def state_sharding(strategy: Strategy, *, expert: bool = False) -> StateSharding:
    """Model-state bytes of one device holding ``parameters``, after ZeRO sharding over ``dp``.

    ZeRO stage >= 1 divides optimizer states, >= 2 also gradients, 3 also weights by ``dp``
    (Rajbhandari et al., SC'20, §5.1-5.3), or by the shard group under hybrid sharding. A
    device's routed-expert parameters (``expert``: already ``1/ep`` of the experts, each ``1/etp``
    of its FFN) shard over the ``tp dp cp / (ep etp)`` ranks holding the same experts instead
    (:attr:`~simulator.strategy.Strategy.expert_replicas`: Megatron-Core's distributed optimizer
    shards expert states over the expert-data-parallel group).
    """
    return _sharding(strategy, state_bytes_per_parameter(strategy), expert)


def _sharding(strategy: Strategy, per_parameter: StateBytes, expert: bool) -> StateSharding:
    """:func:`state_sharding` of the bytes ``per_parameter`` it gives."""
    dp = strategy.expert_replicas if expert else strategy.zero_shards
    return StateSharding(per_parameter=per_parameter,
                         weights_shards=dp if strategy.shards_weights else 1,
                         gradients_shards=dp if strategy.shards_gradients else 1,
                         optimizer_shards=dp if strategy.shards_optimizer_states else 1)


def sharded_state_bytes(parameters: float, strategy: Strategy, *, expert: bool = False) -> StateBytes:
    """Model-state bytes of one device holding ``parameters``, after ZeRO sharding
    (:func:`state_sharding`)."""
    return state_sharding(strategy, expert=expert).of(parameters)


def stage_state_bytes(parameters: float, experts: float, strategy: Strategy) -> StateBytes:
    """Model states of a device holding ``parameters``, ``experts`` of them in routed experts
    (sharded over the expert replicas: :func:`sharded_state_bytes`)."""
    per_parameter = state_bytes_per_parameter(strategy)
    if not experts:
        return _sharding(strategy, per_parameter, False).of(parameters)
    dense = _sharding(strategy, per_parameter, False).bytes_of(parameters - experts)
    routed = _sharding(strategy, per_parameter, True).bytes_of(experts)
    return StateBytes(weights_bytes=dense[0] + routed[0], gradients_bytes=dense[1] + routed[1],
                      optimizer_bytes=dense[2] + routed[2])


def updated_parameters(parameters: float, experts: float, strategy: Strategy) -> float:
    """Parameters whose update a device of a stage holding ``parameters`` runs (elements): ZeRO
    >= 1 updates its shard, of the ``experts`` among them its shard over the expert replicas
    (:func:`sharded_state_bytes`)."""
    sharded = strategy.shards_optimizer_states
    return (parameters - experts) / (strategy.zero_shards if sharded else 1) \
        + experts / (strategy.expert_replicas if sharded else 1)


def fp8_weight_copy_bytes(fp8_parameters: float, strategy: Strategy) -> float:
    """The cached FP8 weights of a device's ``fp8_parameters`` FP8-GEMM parameters (bytes;
    :data:`FP8_WEIGHT_COPY_BYTES` each, sharded like the weights under ZeRO-3); 0
    below precision ``fp8`` or for inference (no step to cache them across)."""
    if strategy.precision != "fp8" or not strategy.training:
        return 0.0
    return fp8_parameters * FP8_WEIGHT_COPY_BYTES / (strategy.zero_shards if strategy.shards_weights else 1)


def optimizer_step_bytes_per_parameter(strategy: Strategy) -> float:
    """Memory traffic of the gradient update per parameter (bytes), read + write.

    Reads the gradient and the fp32 optimizer state (master weights or fp32 weights, moments),
    writes the optimizer state back and, with mixed precision, the working-precision weights
    (PALM §IV-A: the update loads and stores full-precision weights). Adam fp16:
    2 + 12 read + 12 + 2 written = 28; SGD fp16: 2 + 4 + 4 + 2 = 12; Adam fp32: 4 + 12 + 12 = 28.
    0 for inference.
    """
    if not strategy.training:
        return 0.0
    per = state_bytes_per_parameter(strategy)
    if has_master_weights(strategy):
        return per.gradients_bytes + 2.0 * per.optimizer_bytes + per.weights_bytes
    return per.gradients_bytes + 2.0 * (per.optimizer_bytes + per.weights_bytes)


def _mlp_split_terms(model: ModelSpec, moe: bool = False) -> float:
    """TP-split MLP activation bytes per ``s b h``: 2 bytes x (``f/h``) x stored MLP tensors.

    GPT/BERT store the GeLU input and output (2 tensors, ``16`` for ``f = 4h``, Korthikanti §4.1);
    LLaMA stores gate, up and their SwiGLU product (3 tensors). A Mixture-of-Experts layer
    stores the same three tensors of its routed experts for each of a token's ``k`` copies and
    of its shared experts (``k f_e + n_s f_s`` wide), and the ``k`` permuted copies of the
    token (``k h``) the experts take as input (Megatron-Core's ``TEGroupedMLP``).
    """
    if moe:
        inner = model.experts_per_token * model.expert_ffn_hidden_size \
            + model.num_shared_experts * model.shared_expert_size
        return 2.0 * (3.0 * inner / model.hidden_size + model.experts_per_token)
    tensors = 3 if model.architecture == "llama" else 2
    return 2.0 * tensors * model.ffn_hidden_size / model.hidden_size


def _attention_split_terms(model: ModelSpec) -> float:
    """TP-split attention activation bytes per ``s b h``: the queries, keys, values and the
    projection's input, 2 bytes each per element: ``4 + 4 kv_heads / a`` with ``d = h / a``
    (Korthikanti §4.1's ``8``, grouped-query attention's smaller keys and values); with other
    head sizes their widths ``a d``, ``kv_heads d``; under multi-head latent attention ``a d_qk``
    queries and keys, ``a d_v`` values and outputs, and the ``d_q + d_c`` compressed inputs of the
    up-projections (counted split, though the down-projections are replicated)."""
    if model.uses_latent_attention:
        widths = (2.0 * model.num_heads * (model.head_size + model.value_head_size)
                  + model.q_lora_rank + model.kv_lora_rank)
        return 2.0 * widths / model.hidden_size
    if model.head_dim:
        return 2.0 * (2.0 * model.attention_width + 2.0 * model.kv_hidden_size) / model.hidden_size
    return 4.0 + 4.0 * model.kv_heads / model.num_heads


def layer_activation_bytes(model: ModelSpec, strategy: Strategy, moe: bool = False,
                           selective: str = "attention_core") -> float:
    """Activations one transformer layer stashes for one microbatch on one device (bytes).

    Korthikanti et al., MLSys'23, §4 (Eq. 1-2 and Table 2), with ``t`` = tp:
    ``s b h (10 + 24/t + 5 a s/(h t))`` without sequence parallelism,
    ``s b h (34/t + 5 a s/(h t))`` with it; selective recompute drops ``5 a s/(h t)``, and so
    does fused attention (FlashAttention keeps the output and a per-row log-sum-exp, not the
    scores, softmax or dropout mask: Dao et al. NeurIPS'22 §3.1; the log-sum-exp's ``4 a s b``
    bytes are below the formula's precision and not counted); full
    recompute keeps only the ``2 s b h`` layer input (``/ t`` with sequence parallelism). The
    ``24`` is ``8 + 16``: the 8 are Q and the projection's input (2 each) and K and V (2 each,
    ``2 kv_heads / a`` each with grouped-query attention; other head sizes and latent attention
    by :func:`_attention_split_terms`), 16 the MLP's ``2 x 2 f/h`` (generalised for ``f != 4h``,
    SwiGLU and a Mixture-of-Experts layer, ``moe``, by :func:`_mlp_split_terms`). The formula counts
    16-bit activations and 1-byte dropout masks; it is scaled by ``bytes_per_element / 2`` for
    other precisions. Under ``fp8`` the four linear layers' saved inputs are FP8, one byte each
    (:func:`_fp8_saved_per_sbh`).
    Under a stack's ``selective = "alternate_matmuls"`` policy (torchtitan's per-op checkpointing,
    :func:`alternate_matmuls_saved_per_sbh`) selective recompute keeps what that policy saves;
    else it drops what its recompute modules re-run (:func:`recomputed_per_sbh`; the scores'
    ``5 a s/(h t)`` under ``core_attn``).
    Inference stashes nothing but the layer output in flight: ``s b h`` elements (a causal
    decoder's KV cache is static memory: :func:`~simulator.workload.operators.kv_cache_bytes`). Under context
    parallelism ``s`` is a rank's ``s / cp`` tokens (fused attention, whose scores term is absent).
    """
    s, b, h, a, t = (rank_sequence(model, strategy), strategy.microbatch_size, model.hidden_size,
                     model.num_heads, strategy.tp)
    scale, sbh = strategy.bytes_per_element / 2.0, s * b * h
    if not strategy.training:
        return sbh * strategy.bytes_per_element
    if strategy.recompute == "full":
        return scale * 2.0 * sbh / (t if strategy.sequence_parallel else 1)
    if strategy.recompute == "selective" and selective == "alternate_matmuls":
        return scale * sbh * alternate_matmuls_saved_per_sbh(model, strategy)
    split = _attention_split_terms(model) + _mlp_split_terms(model, moe)
    per_sbh = (10.0 + split) / t if strategy.sequence_parallel else 10.0 + split / t
    if "core_attn" not in strategy.recomputed_modules and strategy.attention != "fused":
        per_sbh += 5.0 * a * s / (h * t)
    return scale * sbh * (per_sbh - _fp8_saved_per_sbh(model, strategy, moe) - recomputed_per_sbh(model, strategy, moe))


def recomputed_per_sbh(model: ModelSpec, strategy: Strategy, moe: bool = False) -> float:
    """Bytes per ``s b h`` a layer's stash loses to its selective recompute modules
    (:attr:`~simulator.strategy.Strategy.recomputed_modules`, Megatron-Core's
    ``recompute_modules``), of :func:`layer_activation_bytes`' terms net of what FP8 already
    saves (:func:`_fp8_saved_per_sbh`):

    * ``layernorm``: the two norms' outputs, the QKV and MLP (or router) inputs, ``2 + 2``
      (``/ t`` with sequence parallelism), their 1-byte copies under FP8;
    * ``mlp`` (a dense layer) or ``moe`` (an MoE layer): every tensor of the MLP but its input,
      :func:`_mlp_split_terms` ``/ t`` (less its FP8-saved down-projection inputs);
    * ``moe_act``: the routed experts' activation outputs, ``2 k f_e / (h t)`` (1 byte each
      under FP8); ``shared_experts``: the shared experts' three tensors ``6 n_s f_s / (h t)``;
    * ``mla_up_proj``: MLA's up-projected queries, keys and values, ``2 a (2 d_qk + d_v) / (h t)``;
    * ``core_attn``: the unfused scores (in :func:`layer_activation_bytes`), nothing else.

    ``moe`` takes in ``moe_act`` and ``shared_experts``. Under FP8 a recomputed linear input's
    1-byte copy is dropped with it (Megatron-Core needs Transformer Engine 2.6 for ``layernorm``
    and ``moe_act`` recompute in FP8: ``transformer_config.py``)."""
    modules = strategy.recomputed_modules
    if not modules:
        return 0.0
    t, h, fp8 = strategy.tp, model.hidden_size, strategy.precision == "fp8"
    unsplit = 1.0 / t if strategy.sequence_parallel else 1.0
    routed = model.experts_per_token * model.expert_ffn_hidden_size if moe else 0.0
    shared = model.num_shared_experts * model.shared_expert_size if moe else 0.0
    dropped = (2.0 if fp8 else 4.0) * unsplit if "layernorm" in modules else 0.0
    if "moe" in modules if moe else "mlp" in modules:
        inner = routed + shared if moe else model.ffn_hidden_size
        dropped += (_mlp_split_terms(model, moe) - (inner / h if fp8 else 0.0)) / t
    elif moe:
        dropped += ((1.0 if fp8 else 2.0) * routed / h if "moe_act" in modules else 0.0) / t
        dropped += ((6.0 - (1.0 if fp8 else 0.0)) * shared / h if "shared_experts" in modules else 0.0) / t
    if "mla_up_proj" in modules and model.uses_latent_attention:
        dropped += 2.0 * model.num_heads * (2.0 * model.head_size + model.value_head_size) / (h * t)
    return dropped


def alternate_matmuls_saved_per_sbh(model: ModelSpec, strategy: Strategy) -> float:
    """Bytes per ``s b h`` a LLaMA layer stashes under torchtitan's per-op selective checkpointing
    (``parallelize_llama.py`` @9dec370 L214-265: the outputs of ``aten.mm`` but every second, of
    the flash attention and of ``reduce_scatter_tensor`` are saved, everything else recomputed),
    16-bit: the checkpointed layer input (``h``, ``h/t`` sequence-parallel), the outputs of
    ``wq`` (``h/t``), ``wv`` (``h_kv/t``), the attention (``h/t``; its log-sum-exp not
    counted), ``w1`` (``f/t``) and ``w2`` (``h``: a row-parallel GEMM's partial sums, whole on
    every device before their reduce-scatter), and with sequence parallelism the two
    reduce-scatters' outputs (``h/t`` each), 2 bytes each."""
    t, h = strategy.tp, model.hidden_size
    reduced = 2.0 * h / t if strategy.sequence_parallel else 0.0
    layer_input = h / t if strategy.sequence_parallel else h
    elements = layer_input + (2.0 * model.attention_width + model.kv_hidden_size + model.ffn_hidden_size) / t + h
    return 2.0 * (elements + reduced) / h


def _fp8_saved_per_sbh(model: ModelSpec, strategy: Strategy, moe: bool = False) -> float:
    """Bytes per ``s b h`` that FP8 saves a layer's stash: Transformer Engine keeps each linear
    layer's input for its weight gradient in FP8, 1 byte instead of 2 (TE ``Linear`` saves the
    FP8 ``inputmat_t``, or the FP8 sequence shard with sequence parallelism; TE "Performance
    considerations", "Memory usage"): the QKV and MLP-in inputs (``1`` each, ``1/t`` with
    sequence parallelism), the projection input ``1/t`` and the MLP-out input ``f/(h t)``, of
    Korthikanti's terms (a Mixture-of-Experts layer's MLP-out inputs are its experts' ``k f_e +
    n_s f_s``). 0 below ``fp8``."""
    if strategy.precision != "fp8":
        return 0.0
    t = strategy.tp
    shared = 2.0 / t if strategy.sequence_parallel else 2.0
    inner = model.experts_per_token * model.expert_ffn_hidden_size + model.num_shared_experts \
        * model.shared_expert_size if moe else model.ffn_hidden_size
    return shared + (1.0 + inner / model.hidden_size) / t


def embedding_activation_bytes(model: ModelSpec, strategy: Strategy) -> float:
    """Embedding dropout mask: ``s b h`` bytes (``/ t`` with sequence parallelism), Korthikanti §4.3.

    0 for inference.
    """
    if not strategy.training:
        return 0.0
    sbh = rank_sequence(model, strategy) * strategy.microbatch_size * model.hidden_size
    return sbh / (strategy.tp if strategy.sequence_parallel else 1)


def logits_activation_bytes(model: ModelSpec, strategy: Strategy) -> float:
    """Final norm input, logits input and fp32 logits: ``4 s b h / t (1 + V/h)`` (Korthikanti §4.3).

    Their expression assumes sequence parallelism; without it the two ``2 s b h`` inputs are not
    divided by ``t``. 16-bit terms scale with ``bytes_per_element / 2``. 0 for inference. A
    classification head (:attr:`ModelSpec.num_classes`, first token only) stashes its pooler's
    input and output and the fp32 class scores, ``2 b h`` elements and ``b C`` scores.
    """
    if not strategy.training:
        return 0.0
    s, b, h, t = rank_sequence(model, strategy), strategy.microbatch_size, model.hidden_size, strategy.tp
    if model.num_classes:
        return 2.0 * b * h * strategy.bytes_per_element + CROSS_ENTROPY_BYTES * b * model.num_classes
    inputs = 4.0 * s * b * h * strategy.bytes_per_element / 2.0 / (t if strategy.sequence_parallel else 1)
    return inputs + CROSS_ENTROPY_BYTES * s * b * model.vocab_size / t
