"""A model described as data (layers, hidden size, heads, FFN, sequence, vocabulary, batch).

Transformer shapes follow Megatron-LM (Narayanan et al., SC'21, Table 1) and the original
papers of GPT-3 (Brown et al. 2020), LLaMA 2 (Touvron et al. 2023) and BERT (Devlin et al. 2019);
ResNet-50 follows He et al. 2016, Table 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Architecture = Literal["gpt", "llama", "bert", "resnet50"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A model's shapes.

    Attributes:
        name: preset or file name.
        architecture: ``gpt`` (GeLU MLP, learned positions, tied logits), ``llama``
            (SwiGLU gated MLP, RMSNorm, untied logits), ``bert`` (encoder, GeLU MLP) or
            ``resnet50`` (convolutional; the transformer fields are ignored).
        num_layers: transformer layers ``L`` (ResNet-50: its 16 bottleneck blocks + stem + head
            are generated from the architecture, this field is 50).
        hidden_size: ``h``.
        num_heads: attention heads ``a``.
        ffn_hidden_size: MLP inner size (``4h`` for GPT).
        sequence_length: tokens per sample ``s`` (ResNet-50: 1).
        vocab_size: ``V`` (ResNet-50: number of classes).
        global_batch_size: samples per iteration ``B`` when the strategy does not set it.
        image_size: input height = width in pixels (ResNet-50 only, else 0).
        num_kv_heads: key/value heads (grouped-query attention, Ainslie et al., EMNLP'23: each
            group of ``a / num_kv_heads`` query heads shares one); 0 means ``a`` (multi-head).
        num_classes: classes of a sequence-classification head in place of the language-model
            head (Devlin et al. 2019, §4.1: the first token's final hidden state, through BERT's
            ``h x h`` tanh pooler, times an ``h x num_classes`` layer; Hugging Face
            ``BertForSequenceClassification``); 0 means the language-model head over every token.
        head_dim: width ``d`` of one attention head where it is not ``h / a`` (Qwen3: 128 with
            ``h`` 2048 and 32 heads; GPT-OSS: 64); 0 means ``h / a``.
        num_experts: routed experts ``E`` of a Mixture-of-Experts layer (Shazeer et al., ICLR'17;
            Fedus et al., "Switch Transformers", JMLR'22); 0 for a dense model.
        experts_per_token: experts ``k`` each token is routed to (top-k).
        expert_ffn_hidden_size: inner size ``f_e`` of one expert's SwiGLU MLP.
        num_shared_experts: experts every token passes through besides its routed ones
            (DeepSeekMoE, Dai et al., ACL'24, §3.2), each ``shared_expert_ffn_hidden_size`` wide.
        shared_expert_ffn_hidden_size: inner size of one shared expert (0: ``f_e``).
        first_dense_layers: the first layers keep the dense MLP of ``ffn_hidden_size``
            (DeepSeek-V3's ``first_k_dense_replace`` = 3).
        moe_layer_period: of the other layers, those whose index is a multiple of the period are
            MoE, the others dense (DeepSeek's ``moe_layer_freq``; 1: all of them).
        expert_load_imbalance: tokens of the busiest expert over the mean, ``>= 1`` (1: the
            balanced routing an auxiliary loss or Megatron's forced balance aims at); it scales
            the expert GEMMs each device runs.
        q_lora_rank: multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, §2.1): rank of
            the queries' low-rank compression (0: queries projected directly).
        kv_lora_rank: rank ``d_c`` of the keys' and values' joint compression; > 0 selects
            multi-head latent attention, whose KV cache is the ``d_c + d_rope`` latent per token.
        qk_nope_head_dim, qk_rope_head_dim: a head's query/key width without and with rotary
            positions (MLA's decoupled RoPE).
        v_head_dim: a head's value width (MLA).
        sliding_window: tokens a query of a windowed layer attends to, itself and the ones before
            it (Beltagy et al., "Longformer", arXiv 2004.05150, §3.1; Mistral 7B, arXiv
            2310.06825, §2: "each token can attend to at most W tokens from the previous
            layer"); 0: every layer attends to the whole context.
        sliding_window_pattern: every ``p``-th layer (index ``p - 1``, ``2p - 1``, ...) attends to
            the whole context and the others within :attr:`sliding_window` (Hugging Face
            ``Gemma3Config.sliding_window_pattern``; GPT-OSS's ``layer_types`` alternate from a
            windowed first layer: ``p = 2``); 0: every layer is windowed (Mistral 7B v0.1).
    """

    name: str
    architecture: Architecture
    num_layers: int
    hidden_size: int
    num_heads: int
    ffn_hidden_size: int
    sequence_length: int
    vocab_size: int
    global_batch_size: int
    image_size: int = 0
    num_kv_heads: int = 0
    num_classes: int = 0
    head_dim: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    expert_ffn_hidden_size: int = 0
    num_shared_experts: int = 0
    shared_expert_ffn_hidden_size: int = 0
    first_dense_layers: int = 0
    moe_layer_period: int = 1
    expert_load_imbalance: float = 1.0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int = 0
    sliding_window_pattern: int = 0

    @property
    def is_transformer(self) -> bool:
        """True for the transformer architectures."""
        return self.architecture != "resnet50"

    @property
    def is_causal(self) -> bool:
        """True for the decoder architectures (GPT, LLaMA), whose attention masks the future and
        which generate token by token against a KV cache."""
        return self.architecture in ("gpt", "llama")

    @property
    def kv_heads(self) -> int:
        """Key/value heads: :attr:`num_kv_heads`, or ``a`` without grouped-query attention."""
        return self.num_kv_heads or self.num_heads

    @property
    def kv_hidden_size(self) -> int:
        """Width of the keys (and of the values): ``kv_heads * d`` (``h * kv_heads / a``)."""
        if self.head_dim:
            return self.kv_heads * self.head_dim
        return self.hidden_size * self.kv_heads // self.num_heads

    @property
    def head_size(self) -> float:
        """Width of one head's queries and keys ``d``: :attr:`head_dim`, ``h / a``, or MLA's
        ``qk_nope_head_dim + qk_rope_head_dim``."""
        if self.uses_latent_attention:
            return float(self.qk_nope_head_dim + self.qk_rope_head_dim)
        return float(self.head_dim) if self.head_dim else self.hidden_size / self.num_heads

    @property
    def value_head_size(self) -> float:
        """Width of one head's values: MLA's ``v_head_dim``, else :attr:`head_size`."""
        return float(self.v_head_dim) if self.uses_latent_attention else self.head_size

    @property
    def attention_width(self) -> int:
        """Width of the attention's output before its projection, ``a d_v`` (``h`` unless the
        heads are sized otherwise)."""
        if self.uses_latent_attention:
            return self.num_heads * self.v_head_dim
        return self.num_heads * self.head_dim if self.head_dim else self.hidden_size

    @property
    def uses_latent_attention(self) -> bool:
        """Multi-head latent attention (``kv_lora_rank > 0``, DeepSeek-V2 §2.1)."""
        return self.kv_lora_rank > 0

    @property
    def is_moe(self) -> bool:
        """A Mixture-of-Experts model (``num_experts > 0``)."""
        return self.num_experts > 0

    @property
    def shared_expert_size(self) -> int:
        """Inner size of one shared expert (:attr:`shared_expert_ffn_hidden_size` or ``f_e``)."""
        return self.shared_expert_ffn_hidden_size or self.expert_ffn_hidden_size

    def is_moe_layer(self, index: int) -> bool:
        """True if layer ``index`` (0-based) is a Mixture-of-Experts layer: past the
        :attr:`first_dense_layers` and a multiple of :attr:`moe_layer_period` (DeepSeek-V3's
        ``modeling_deepseek.py`` rule)."""
        return self.is_moe and index >= self.first_dense_layers and index % self.moe_layer_period == 0

    def attention_window(self, index: int) -> int:
        """Tokens each query of layer ``index`` (0-based) attends to at most: the
        :attr:`sliding_window` on a windowed layer (:attr:`sliding_window_pattern`), else 0 (the
        whole context). An encoder attends both ways and takes none."""
        if not self.sliding_window or not self.is_causal:
            return 0
        full = self.sliding_window_pattern and (index + 1) % self.sliding_window_pattern == 0
        return 0 if full else self.sliding_window

    @property
    def num_moe_layers(self) -> int:
        """Layers that are Mixture-of-Experts layers."""
        return sum(1 for index in range(self.num_layers) if self.is_moe_layer(index))
