"""``BertConfig``: BERT's ``config.json`` (see :mod:`ember.models.bert`)."""

from __future__ import annotations

from typing import Any, ClassVar

from ember.errors import ConfigError
from ember.models.activations import check_activation
from ember.models.config import HfConfig

__all__ = ["BertConfig"]


class BertConfig(HfConfig):
    """BERT's ``config.json`` fields (Hugging Face's names and defaults). ``num_labels``
    is the length of ``id2label`` when the file has one (as in ``transformers``);
    ``id2label``, ``label2id`` and ``problem_type`` stay in ``extra``."""

    model_type: ClassVar[str] = "bert"
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int | None = 0
    position_embedding_type: str = "absolute"
    classifier_dropout: float | None = None
    num_labels: int = 2
    is_decoder: bool = False
    add_cross_attention: bool = False
    tie_word_embeddings: bool = True

    def validate(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"ember: BertConfig: hidden_size={self.hidden_size} must be divisible by "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.num_labels < 1:
            raise ConfigError(f"ember: BertConfig: num_labels must be >= 1, got {self.num_labels}")
        check_activation("BertConfig.hidden_act", self.hidden_act)
        unsupported = [
            name
            for name, value in (
                (
                    f"position_embedding_type={self.position_embedding_type!r}",
                    self.position_embedding_type != "absolute",
                ),
                ("is_decoder (causal BERT)", self.is_decoder),
                ("add_cross_attention", self.add_cross_attention),
            )
            if value
        ]
        if unsupported:
            raise ConfigError(
                f"ember: BertConfig: ember's BERT does not implement {', '.join(unsupported)} "
                "(it is a bidirectional encoder with absolute position embeddings)"
            )

    @classmethod
    def adapt_hf(cls, data: dict[str, Any]) -> dict[str, Any]:
        id2label = data.get("id2label")
        return {"num_labels": len(id2label)} if isinstance(id2label, dict) and id2label else {}

    def to_hf(self) -> dict[str, Any]:
        out = super().to_hf()
        del out["num_labels"]  # transformers derives it from id2label, as here
        id2label = out.get("id2label")
        if isinstance(id2label, dict) and len(id2label) == self.num_labels:
            return out
        if id2label is not None or self.num_labels != 2:  # transformers' num_labels setter
            out["id2label"] = {str(i): f"LABEL_{i}" for i in range(self.num_labels)}
            out["label2id"] = {f"LABEL_{i}": i for i in range(self.num_labels)}
        return out

    @property
    def classifier_dropout_prob(self) -> float:
        """The classifier's dropout: ``classifier_dropout``, else ``hidden_dropout_prob``."""
        return float(self.hidden_dropout_prob if self.classifier_dropout is None else self.classifier_dropout)
