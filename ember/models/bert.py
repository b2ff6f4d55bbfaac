"""BERT (Devlin et al., 2019) in Hugging Face's layout: ``BertForMaskedLM`` and
``BertForSequenceClassification`` over :class:`BertModel`.

The module tree carries Hugging Face's names (``bert.encoder.layer.0.intermediate.dense``,
``cls.predictions.transform.LayerNorm``) except inside the attention block, whose query,
key, value and output projections are ember's :class:`MultiHeadAttention`: the weight
map renames ``attention.self`` (a name a module field cannot have) to
``attention.self_attn``, ``attention.output.dense`` to the attention's ``output`` and
``attention.output.LayerNorm`` to ``attention.LayerNorm``.

>>> config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
...                     intermediate_size=32, max_position_embeddings=16)
>>> BertForMaskedLM.from_config(config)(Tensor.from_ints([[1, 2, 3]])).dims()
[1, 3, 64]
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ember.backend.dtype import DType
from ember.device import Device
from ember.errors import ModuleError
from ember.models.activations import activation
from ember.models.bert_config import BertConfig
from ember.models.config import HfConfig
from ember.models.pretrained import PretrainedModel
from ember.module import Module, Param, Rename, WeightMap
from ember.nn import Dropout, Embedding, LayerNorm, LayerNormConfig, Linear, MultiHeadAttention, Normal, Zeros
from ember.nn.init import Initializer
from ember.tensor import Tensor

__all__ = [
    "BertAttention",
    "BertConfig",
    "BertEmbeddings",
    "BertEncoder",
    "BertForMaskedLM",
    "BertForSequenceClassification",
    "BertLayer",
    "BertModel",
]


class _PaddedNormal(Initializer):
    """``Normal(0, std)`` with the ``padding_idx`` row zeroed (PyTorch's and Hugging
    Face's initialisation of an embedding with a padding index)."""

    std: float = 0.02
    padding_idx: int | None = None

    def init_with(self, shape, fan_in=None, fan_out=None, device=None, dtype=DType.FLOAT32) -> Tensor:
        weight = Normal(0.0, self.std).init_with(shape, fan_in, fan_out, device, dtype)
        if self.padding_idx is None or not 0 <= self.padding_idx < shape[0]:
            return weight
        keep = np.ones((shape[0], 1), np.float32)
        keep[self.padding_idx] = 0.0
        return weight.mul(Tensor.from_data(keep, device=weight.device).cast(weight.dtype))


class BertEmbeddings(Module):
    """Word, position and token-type embeddings summed, then layer norm and dropout."""

    word_embeddings: Embedding
    position_embeddings: Embedding
    token_type_embeddings: Embedding
    LayerNorm: LayerNorm
    dropout: Dropout

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None, position_ids: Tensor | None) -> Tensor:
        if position_ids is None:
            position_ids = Tensor.arange(input_ids.dims()[-1], device=input_ids.device).unsqueeze_dim(0)
        if token_type_ids is None:
            token_type_ids = Tensor.zeros_like(input_ids)
        x = self.word_embeddings(input_ids).add(self.token_type_embeddings(token_type_ids))
        return self.dropout(self.LayerNorm(x.add(self.position_embeddings(position_ids))))


class BertAttention(Module):
    """Self-attention, dropout, then ``LayerNorm(x + attended)`` (post-norm)."""

    self_attn: MultiHeadAttention
    LayerNorm: LayerNorm
    dropout: Dropout

    def forward(self, x: Tensor, mask_pad: Tensor | None) -> Tensor:
        attended = self.self_attn(x, mask_pad=mask_pad).context
        return self.LayerNorm(self.dropout(attended).add(x))


class BertIntermediate(Module):
    """``act(dense(x))``: the feed-forward block's expansion."""

    dense: Linear
    hidden_act: str = "gelu"

    def forward(self, x: Tensor) -> Tensor:
        return activation(self.hidden_act, self.dense(x))


class BertOutput(Module):
    """``LayerNorm(residual + dropout(dense(x)))``: the feed-forward block's projection."""

    dense: Linear
    LayerNorm: LayerNorm
    dropout: Dropout

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)).add(residual))


class BertLayer(Module):
    """One encoder layer: attention, then the feed-forward block (both post-norm)."""

    attention: BertAttention
    intermediate: BertIntermediate
    output: BertOutput

    def forward(self, x: Tensor, mask_pad: Tensor | None = None) -> Tensor:
        attended = self.attention(x, mask_pad)
        return self.output(self.intermediate(attended), attended)


class BertEncoder(Module):
    """The stack of :class:`BertLayer`."""

    layer: list[BertLayer]

    def forward(self, x: Tensor, mask_pad: Tensor | None = None) -> Tensor:
        for block in self.layer:
            x = block(x, mask_pad)
        return x


class BertPooler(Module):
    """``tanh(dense(hidden[:, 0]))``: the first ([CLS]) token's summary of the sequence."""

    dense: Linear

    def forward(self, hidden: Tensor) -> Tensor:
        return self.dense(hidden.narrow(1, 0, 1).squeeze_dim(1)).tanh()


class BertModel(PretrainedModel):
    """The bare BERT encoder (``"BertModel"`` checkpoints, as sentence-embedding models
    ship): embeddings and encoder; ``pooler`` (present in bare checkpoints and for
    sequence classification) summarises the first token. ``forward`` returns the hidden
    states ``[batch, seq, hidden_size]`` (transformers' ``last_hidden_state``);
    :meth:`pooled` gives ``pooler_output``. The heads hold one as ``bert``."""

    hf_architecture: ClassVar[str] = "BertModel"
    config_class: ClassVar[type[HfConfig]] = BertConfig
    config: BertConfig
    embeddings: BertEmbeddings
    encoder: BertEncoder
    pooler: BertPooler | None = None

    @classmethod
    def from_config(cls, config: BertConfig, device: Device | None = None) -> BertModel:
        return cls.build(config, device or Device.default(), pooler=True)

    def pooled(self, hidden: Tensor) -> Tensor:
        """transformers' ``pooler_output``: ``tanh(dense(hidden[:, 0]))``, ``[batch, hidden_size]``."""
        if self.pooler is None:
            raise ModuleError("ember: BertModel.pooled: this encoder was built without a pooler (a masked-LM trunk)")
        return self.pooler(hidden)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> Tensor:
        """Hidden states of ``input_ids`` ``[batch, seq]``; ``attention_mask`` ``[batch, seq]``
        holds 1 for tokens and 0 for padding (hidden as keys, as in ``transformers``);
        ``token_type_ids`` default to zeros (one segment), ``position_ids`` to ``0..seq-1``."""
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        # MultiHeadAttention sets the hidden keys' scores to min_float (-1e4) where
        # transformers adds finfo.min: both weigh them exactly 0 after the softmax.
        mask_pad = None if attention_mask is None else attention_mask.equal_elem(0)
        return self.encoder(x, mask_pad)

    @staticmethod
    def build(config: BertConfig, device: Device, pooler: bool) -> BertModel:
        """A freshly (lazily) initialised encoder, as ``transformers`` initialises one."""
        return BertModel(
            config=config,
            embeddings=BertEmbeddings(
                word_embeddings=Embedding(
                    weight=_PaddedNormal(std=config.initializer_range, padding_idx=config.pad_token_id).lazy(
                        (config.vocab_size, config.hidden_size), device=device
                    )
                ),
                position_embeddings=_embedding(config, config.max_position_embeddings, device),
                token_type_embeddings=_embedding(config, config.type_vocab_size, device),
                LayerNorm=_norm(config, device),
                dropout=Dropout(config.hidden_dropout_prob),
            ),
            encoder=BertEncoder(layer=[_layer(config, device) for _ in range(config.num_hidden_layers)]),
            pooler=BertPooler(dense=_linear(config, config.hidden_size, config.hidden_size, device))
            if pooler
            else None,
        )

    def weight_map(self) -> WeightMap:
        return WeightMap(renames=_RENAMES, ignore=(_BUFFERS,))


def _linear(config: BertConfig, d_in: int, d_out: int, device: Device, bias: bool = True) -> Linear:
    return Linear(
        weight=Normal(0.0, config.initializer_range).lazy((d_in, d_out), d_in, d_out, device),
        bias=Zeros().lazy((d_out,), d_in, d_out, device) if bias else None,
    )


def _norm(config: BertConfig, device: Device) -> LayerNorm:
    return LayerNormConfig(config.hidden_size, epsilon=config.layer_norm_eps).init(device)


def _embedding(config: BertConfig, n: int, device: Device) -> Embedding:
    return Embedding(weight=Normal(0.0, config.initializer_range).lazy((n, config.hidden_size), device=device))


def _layer(config: BertConfig, device: Device) -> BertLayer:
    d, d_ff = config.hidden_size, config.intermediate_size
    attention = MultiHeadAttention(
        query=_linear(config, d, d, device),
        key=_linear(config, d, d, device),
        value=_linear(config, d, d, device),
        output=_linear(config, d, d, device),
        dropout=Dropout(config.attention_probs_dropout_prob),
        n_heads=config.num_attention_heads,
    )
    return BertLayer(
        attention=BertAttention(
            self_attn=attention, LayerNorm=_norm(config, device), dropout=Dropout(config.hidden_dropout_prob)
        ),
        intermediate=BertIntermediate(dense=_linear(config, d, d_ff, device), hidden_act=config.hidden_act),
        output=BertOutput(
            dense=_linear(config, d_ff, d, device),
            LayerNorm=_norm(config, device),
            dropout=Dropout(config.hidden_dropout_prob),
        ),
    )


#: Buffers transformers recomputes (older checkpoints store them).
_BUFFERS = r"(^|\.)embeddings\.(position_ids|token_type_ids)$"
_RENAMES = (
    Rename("attention.self", "attention.self_attn"),
    Rename("attention.output.dense", "attention.self_attn.output"),
    Rename("attention.output.LayerNorm", "attention.LayerNorm"),
)


class BertPredictionHeadTransform(Module):
    """``LayerNorm(act(dense(x)))`` before the vocabulary projection."""

    dense: Linear
    LayerNorm: LayerNorm
    hidden_act: str = "gelu"

    def forward(self, x: Tensor) -> Tensor:
        return self.LayerNorm(activation(self.hidden_act, self.dense(x)))


class BertLMPredictionHead(Module):
    """The transform, then the projection onto the vocabulary: the word embeddings
    (transposed) plus ``bias`` when tied, else ``decoder`` (with its own bias, as
    ``transformers`` 5 unties it)."""

    transform: BertPredictionHeadTransform
    bias: Param
    decoder: Linear | None = None

    def forward(self, hidden: Tensor, word_embeddings: Embedding) -> Tensor:
        hidden = self.transform(hidden)
        if self.decoder is not None:
            return self.decoder(hidden)
        return word_embeddings.attend(hidden).add(self.bias.val())


class BertOnlyMLMHead(Module):
    """``cls`` of :class:`BertForMaskedLM`: holds ``predictions``."""

    predictions: BertLMPredictionHead


class BertForMaskedLM(PretrainedModel):
    """BERT with its masked-language-model head; ``model(input_ids)`` returns logits
    ``[batch, seq, vocab_size]``. The decoder is tied to the word embeddings unless the
    config unties them."""

    hf_architecture: ClassVar[str] = "BertForMaskedLM"
    base_model_prefix: ClassVar[str] = "bert"
    config_class: ClassVar[type[HfConfig]] = BertConfig
    config: BertConfig
    bert: BertModel
    cls: BertOnlyMLMHead

    @classmethod
    def from_config(cls, config: BertConfig, device: Device | None = None) -> BertForMaskedLM:
        device = device or Device.default()
        d, vocab = config.hidden_size, config.vocab_size
        predictions = BertLMPredictionHead(
            transform=BertPredictionHeadTransform(
                dense=_linear(config, d, d, device), LayerNorm=_norm(config, device), hidden_act=config.hidden_act
            ),
            bias=Zeros().lazy((vocab,), device=device),
            decoder=None if config.tie_word_embeddings else _linear(config, d, vocab, device),
        )
        return cls(
            config=config,
            bert=BertModel.build(config, device, pooler=False),
            cls=BertOnlyMLMHead(predictions=predictions),
        )

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> Tensor:
        """Logits ``[batch, seq, vocab_size]`` (arguments as :meth:`BertModel.forward`)."""
        hidden = self.bert(input_ids, attention_mask, token_type_ids, position_ids)
        return self.cls.predictions(hidden, self.bert.embeddings.word_embeddings)

    def weight_map(self) -> WeightMap:
        # Pre-training checkpoints (bert-base-uncased) also hold the pooler and the
        # next-sentence head, which this head does not use (transformers skips them too).
        ignore = [_BUFFERS, r"^bert\.pooler\.", r"^cls\.seq_relationship\."]
        if self.cls.predictions.decoder is None:
            ignore.append(r"^cls\.predictions\.decoder\.(weight|bias)$")  # tied copies in older files
        return WeightMap(renames=_RENAMES, ignore=tuple(ignore))


class BertForSequenceClassification(PretrainedModel):
    """BERT with the pooler, dropout and a linear classifier; ``model(input_ids)`` returns
    logits ``[batch, num_labels]``."""

    hf_architecture: ClassVar[str] = "BertForSequenceClassification"
    base_model_prefix: ClassVar[str] = "bert"
    config_class: ClassVar[type[HfConfig]] = BertConfig
    config: BertConfig
    bert: BertModel
    dropout: Dropout
    classifier: Linear

    @classmethod
    def from_config(cls, config: BertConfig, device: Device | None = None) -> BertForSequenceClassification:
        device = device or Device.default()
        return cls(
            config=config,
            bert=BertModel.build(config, device, pooler=True),
            dropout=Dropout(config.classifier_dropout_prob),
            classifier=_linear(config, config.hidden_size, config.num_labels, device),
        )

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> Tensor:
        """Logits ``[batch, num_labels]`` (arguments as :meth:`BertModel.forward`)."""
        hidden = self.bert(input_ids, attention_mask, token_type_ids, position_ids)
        assert self.bert.pooler is not None
        return self.classifier(self.dropout(self.bert.pooler(hidden)))

    def weight_map(self) -> WeightMap:
        return WeightMap(renames=_RENAMES, ignore=(_BUFFERS,))
