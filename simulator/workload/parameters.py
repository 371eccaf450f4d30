"""A transformer's parameter counts, total and active per token, summed from its operators.

The counts add the parameters the operators of :mod:`simulator.workload.operators` hold on one
device of an unsplit plan (``tp = ep = 1``): what the simulator costs is what it counts. A
Mixture-of-Experts layer activates its router, its shared experts and ``k`` of its ``E`` routed
experts per token (Shazeer et al., ICLR'17; DeepSeekMoE, Dai et al., ACL'24).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.strategy import Strategy
from simulator.workload import operators
from simulator.workload.spec import ModelSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class ParameterCount:
    """Parameters of a transformer (elements).

    Attributes:
        total: every parameter (a tied logits table counted once).
        active: those one token uses: all but the ``E - k`` routed experts it is not sent to.
        embedding: the input embedding table (``V h``, and GPT's positions), part of both, which
            some model cards leave out of the active count (gpt-oss, arXiv 2508.10925, Table 1).
    """

    total: float
    active: float
    embedding: float


def parameter_count(model: ModelSpec) -> ParameterCount:
    """Total and active parameters of a transformer (elements).

    Raises:
        ValueError: ``model`` is not a transformer.
    """
    if not model.is_transformer:
        raise ValueError(f"parameter_count needs a transformer, got {model.architecture!r}")
    one = Strategy()
    bpe = one.bytes_per_element
    embedding = sum(op.parameter_bytes for op in operators.embedding(model, one)) / bpe
    logits = sum(op.parameter_bytes for op in operators.logits(model, one)) / bpe
    if model.architecture != "llama":  # tied: the logits GEMM reads the embedding table
        logits -= model.vocab_size * model.hidden_size
    total = active = embedding + logits
    for index in range(model.num_layers):
        ops = operators.transformer_layer(model, one, moe=model.is_moe_layer(index))
        layer = sum(op.parameter_bytes for op in ops) / bpe
        experts = sum(op.parameter_bytes for op in ops if op.expert) / bpe
        total += layer
        active += layer - experts * (1.0 - model.experts_per_token / max(model.num_experts, 1))
    return ParameterCount(total=total, active=active, embedding=embedding)
