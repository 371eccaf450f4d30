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

    @property
    def is_transformer(self) -> bool:
        """True for the transformer architectures."""
        return self.architecture != "resnet50"

    @property
    def kv_heads(self) -> int:
        """Key/value heads: :attr:`num_kv_heads`, or ``a`` without grouped-query attention."""
        return self.num_kv_heads or self.num_heads

    @property
    def kv_hidden_size(self) -> int:
        """Width of the keys (and of the values): ``h * kv_heads / a``."""
        return self.hidden_size * self.kv_heads // self.num_heads
