"""BERT from checkpoints ``transformers`` saved: both heads' logits (padding and token
types included), round trips, dtypes, shards, keys, config, and fine-tuning against a
torch twin step by step."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import ConfigError, RecordError
from ember.models import (
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertModel,
    LoadReport,
    from_pretrained,
)
from ember.module.safetensors_file import read_safetensors, write_safetensors
from tests.conftest import make_device
from tests.models.hf import assert_logits, import_transformers, save_random, torch_logits

CONFIG = dict(
    vocab_size=97,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=32,
    type_vocab_size=2,
)
HEADS = {"mlm": "BertForMaskedLM", "cls": "BertForSequenceClassification"}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """``{head: (directory, transformers model)}``; the classifier has three labels."""
    out = {}
    for key, name in HEADS.items():
        directory = tmp_path_factory.mktemp(key)
        extra = {"num_labels": 3, "problem_type": "single_label_classification"} if key == "cls" else {}
        out[key] = directory, save_random(name, "BertConfig", directory, seed=1, **CONFIG, **extra)
    return out


def batch(rng, size=2, seq=7):
    """Token ids (no pad id among the real tokens), a right-padded mask and two segments."""
    ids = rng.integers(1, CONFIG["vocab_size"], size=(size, seq))
    mask = np.ones_like(ids)
    mask[0, seq - 2 :] = 0
    ids[mask == 0] = 0  # pad_token_id
    types = np.zeros_like(ids)
    types[:, seq // 2 :] = 1
    return ids, mask, types


def run(model, ids, mask=None, types=None, device=None):
    device = device or Device.flex()

    def tensor(array):
        return None if array is None else Tensor.from_data(array, device=device)

    return model(tensor(ids), tensor(mask), tensor(types))


def reference(model, ids, mask=None, types=None):
    kwargs = {k: v for k, v in (("attention_mask", mask), ("token_type_ids", types)) if v is not None}
    return torch_logits(model, ids, **kwargs)


@pytest.mark.parametrize("head", HEADS)
def test_logits_match_transformers_on_flex(checkpoints, rng, head):
    directory, theirs = checkpoints[head]
    model = from_pretrained(directory, device=Device.flex())
    assert type(model).__name__ == HEADS[head]
    ids, _, types = batch(rng)
    ids[ids == 0] = 1
    assert_logits(run(model, ids), reference(theirs, ids))
    assert_logits(run(model, ids, types=types), reference(theirs, ids, types=types))
    expected = (2, 7, CONFIG["vocab_size"]) if head == "mlm" else (2, 3)
    assert run(model, ids).dims() == list(expected)


@pytest.mark.parametrize("head", HEADS)
def test_padding_mask_matches_transformers(checkpoints, rng, head):
    directory, theirs = checkpoints[head]
    model = from_pretrained(directory)
    ids, mask, types = batch(rng)
    ours = run(model, ids, mask, types).to_numpy()
    expected = reference(theirs, ids, mask, types)
    if head == "mlm":  # the real tokens' logits
        assert_logits(ours[0, :5], expected[0, :5])
        assert_logits(ours[1], expected[1])
    else:
        assert_logits(ours, expected)
    padded = ids.copy()
    padded[0, 5:] = 7  # what the padding holds does not matter once it is masked
    again = run(model, padded, mask, types).to_numpy()
    if head == "mlm":
        again, ours = again[:, :5], ours[:, :5]
    assert_logits(again, ours)


@pytest.mark.gpu
@pytest.mark.parametrize("head", HEADS)
def test_logits_match_transformers_on_cube(checkpoints, rng, head):
    directory, theirs = checkpoints[head]
    device = make_device("cube")
    model = from_pretrained(directory, device=device)
    ids, mask, types = batch(rng, 2, 5)
    assert_logits(run(model, ids, mask, types, device), reference(theirs, ids, mask, types), rtol=1e-4)


@pytest.mark.parametrize("head", HEADS)
def test_save_pretrained_round_trips_through_transformers(checkpoints, tmp_path, rng, head):
    directory, theirs = checkpoints[head]
    transformers = import_transformers()
    model = from_pretrained(directory)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == [HEADS[head]] and config["model_type"] == "bert"
    assert "num_labels" not in config
    if head == "cls":  # the labels and problem type are written back as transformers wrote them
        assert config["id2label"] == {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}
        assert config["problem_type"] == "single_label_classification"
    stored, _ = read_safetensors(directory / "model.safetensors")
    ours, _ = read_safetensors(tmp_path / "model.safetensors")
    assert sorted(ours) == sorted(stored)
    for key in stored:
        np.testing.assert_array_equal(ours[key], stored[key], err_msg=key)
    back = getattr(transformers, HEADS[head]).from_pretrained(str(tmp_path)).eval()
    ids, mask, types = batch(rng)
    np.testing.assert_array_equal(reference(back, ids, mask, types), reference(theirs, ids, mask, types))


def test_sharded_checkpoints_load_and_save(checkpoints, tmp_path, rng):
    directory, theirs = checkpoints["mlm"]
    transformers = import_transformers()
    theirs.save_pretrained(str(tmp_path / "theirs"), max_shard_size="20KB")
    assert (tmp_path / "theirs" / "model.safetensors.index.json").is_file()
    model = from_pretrained(tmp_path / "theirs")
    ids, mask, types = batch(rng)
    expected = reference(theirs, ids, mask, types)
    assert_logits(run(model, ids, mask, types), expected)
    model.save_pretrained(tmp_path / "ours", max_shard_size=20_000)
    assert len(list((tmp_path / "ours").glob("model-*-of-*.safetensors"))) > 1
    back = transformers.BertForMaskedLM.from_pretrained(str(tmp_path / "ours")).eval()
    np.testing.assert_array_equal(reference(back, ids, mask, types), expected)


def test_bfloat16_checkpoint(checkpoints, tmp_path, rng):
    import torch

    directory, theirs = checkpoints["cls"]
    half = type(theirs).from_pretrained(str(directory)).to(torch.bfloat16)
    half.save_pretrained(str(tmp_path))
    ids, mask, types = batch(rng)
    expected = reference(half.float().eval(), ids, mask, types)  # the rounded weights in float32
    assert_logits(run(from_pretrained(tmp_path), ids, mask, types), expected)
    model = from_pretrained(tmp_path, dtype="bfloat16")
    assert model.bert.embeddings.word_embeddings.weight.dtype.name.lower() == "bfloat16"
    assert_logits(run(model, ids, mask, types).float(), expected, rtol=5e-2)


def test_untied_decoder_and_pretraining_checkpoints(tmp_path, rng):
    transformers = import_transformers()
    import torch

    untied = save_random("BertForMaskedLM", "BertConfig", tmp_path / "untied", **CONFIG, tie_word_embeddings=False)
    model = from_pretrained(tmp_path / "untied")
    assert model.cls.predictions.decoder is not None
    ids, mask, types = batch(rng)
    assert_logits(run(model, ids, mask, types)[1], reference(untied, ids, mask, types)[1])
    # A pre-training checkpoint as the Hub's bert-base-uncased: pooler, next-sentence
    # head, the decoder's tied copies and the position_ids buffer, under BertForMaskedLM.
    pretraining = save_random("BertForPreTraining", "BertConfig", tmp_path / "pre", **CONFIG)
    arrays = {k: v.detach().numpy() for k, v in pretraining.state_dict().items()}
    arrays["bert.embeddings.position_ids"] = np.arange(CONFIG["max_position_embeddings"])[None]
    config = json.loads((tmp_path / "pre" / "config.json").read_text())
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text(json.dumps({**config, "architectures": ["BertForMaskedLM"]}))
    write_safetensors(tmp_path / "old" / "model.safetensors", arrays, {"format": "pt"})
    with torch.no_grad():
        expected = pretraining(torch.as_tensor(ids), attention_mask=torch.as_tensor(mask)).prediction_logits.numpy()
    assert_logits(run(from_pretrained(tmp_path / "old"), ids, mask)[1], expected[1])
    assert transformers  # the oracle saved both


def test_missing_and_unexpected_keys(checkpoints, tmp_path):
    directory, _ = checkpoints["cls"]
    arrays, _ = read_safetensors(directory / "model.safetensors")
    arrays = dict(arrays)
    del arrays["bert.encoder.layer.1.attention.output.LayerNorm.weight"]
    arrays["bert.extra.weight"] = np.zeros(3, np.float32)
    (tmp_path / "config.json").write_text((directory / "config.json").read_text())
    write_safetensors(tmp_path / "model.safetensors", arrays, {"format": "pt"})
    with pytest.raises(RecordError, match=r"(?s)layer\.1\.attention\.LayerNorm\.gamma.*bert\.extra\.weight"):
        from_pretrained(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = from_pretrained(tmp_path, strict=False)
    assert any(isinstance(w.message, LoadReport) and "bert.extra.weight" in str(w.message) for w in caught)
    assert model(Tensor.from_ints([[1, 2]])).dims() == [1, 3]


def test_config_labels_and_unsupported_options(checkpoints, tmp_path):
    directory, _ = checkpoints["cls"]
    data = json.loads((directory / "config.json").read_text())
    config = BertConfig.from_hf(data)
    assert config.num_labels == 3 and config.extra["label2id"]["LABEL_2"] == 2
    assert BertConfig.from_hf({**data, "num_labels": 5}).num_labels == 3  # id2label wins, as in transformers
    assert BertConfig.from_hf({"num_labels": 5}).num_labels == 5
    written = BertConfig(num_labels=4).to_hf()
    assert written["id2label"] == {str(i): f"LABEL_{i}" for i in range(4)} and "num_labels" not in written
    assert "id2label" not in BertConfig().to_hf()  # two labels: transformers' default
    for option, match in (
        ({"position_embedding_type": "relative_key"}, "position_embedding_type='relative_key'"),
        ({"is_decoder": True}, "is_decoder"),
        ({"hidden_act": "swishy"}, "unknown activation 'swishy'"),
    ):
        (tmp_path / "config.json").write_text(json.dumps({**data, **option}))
        with pytest.raises(ConfigError, match=match):
            from_pretrained(tmp_path)


def test_from_config_initialises_as_transformers(tmp_path, rng):
    transformers = import_transformers()
    config = BertConfig(**CONFIG, num_labels=4)
    model = BertForSequenceClassification.from_config(config)
    words = model.bert.embeddings.word_embeddings.weight.val().to_numpy()
    assert np.all(words[0] == 0) and 0.01 < words[1:].std() < 0.03  # padding row, normal(0, 0.02)
    assert np.all(model.classifier.bias.val().to_numpy() == 0)  # type: ignore[union-attr]
    model.save_pretrained(tmp_path)
    theirs = transformers.BertForSequenceClassification.from_pretrained(str(tmp_path)).eval()
    assert theirs.config.num_labels == 4
    ids, mask, types = batch(rng)
    assert_logits(run(model, ids, mask, types), reference(theirs, ids, mask, types))
    assert BertForMaskedLM.from_config(config)(Tensor.from_ints([[1, 2, 3]])).dims() == [1, 3, 97]


def test_fine_tuning_matches_torch_step_by_step(tmp_path, rng):
    """20 AdamW steps of sequence classification from one checkpoint, in torch and in
    ember (dropout off in both): the losses agree at every step, then the logits."""
    import torch

    from ember.nn.loss import CrossEntropyLossConfig
    from ember.optim import AdamWConfig, GradientsParams

    config = dict(CONFIG, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    theirs = save_random("BertForSequenceClassification", "BertConfig", tmp_path, seed=2, **config).train()
    ids, mask, types = batch(rng, 4, 9)
    ids[3, 4:], mask[3, 4:] = 0, 0
    labels = np.array([0, 2, 1, 2])
    t_optim = torch.optim.AdamW(theirs.parameters(), lr=1e-3, weight_decay=0.01)
    t_inputs = dict(attention_mask=torch.as_tensor(mask), token_type_ids=torch.as_tensor(types))
    t_losses = []
    for _ in range(20):
        t_optim.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            theirs(torch.as_tensor(ids), **t_inputs).logits, torch.as_tensor(labels)
        )
        loss.backward()
        t_optim.step()
        t_losses.append(loss.item())

    device = Device.flex().autodiff()
    model = from_pretrained(tmp_path, device=device)
    optim = AdamWConfig(epsilon=1e-8, weight_decay=0.01).init()  # torch's eps (ember's default is 1e-5)
    criterion = CrossEntropyLossConfig().init()
    x, m, t, y = (Tensor.from_data(a, device=device) for a in (ids, mask, types, labels))
    losses = []
    for _ in range(20):
        loss = criterion(model(x, m, t), y)
        losses.append(loss.into_scalar())
        model = optim.step(1e-3, model, GradientsParams.from_grads(loss.backward(), model))
    np.testing.assert_allclose(losses, t_losses, rtol=1e-4)
    assert t_losses[-1] < t_losses[0] - 0.1  # it did learn
    assert_logits(run(model.valid(), ids, mask, types), reference(theirs.eval(), ids, mask, types), rtol=1e-4)


def test_a_classifier_over_a_masked_lm_checkpoint_keeps_its_fresh_head(checkpoints):
    """As transformers: the encoder loads, the classifier is new, a LoadReport names it."""
    directory = checkpoints["mlm"][0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = BertForSequenceClassification.from_pretrained(directory)
    report = [str(w.message) for w in caught if isinstance(w.message, LoadReport)]
    assert report and "classifier.weight" in report[0]
    masked = from_pretrained(directory)
    np.testing.assert_array_equal(
        model.bert.embeddings.word_embeddings.weight.val().to_numpy(),
        masked.bert.embeddings.word_embeddings.weight.val().to_numpy(),
    )


def test_a_bare_encoder_checkpoint_gives_the_hidden_states_and_pooled_output(tmp_path, rng):
    """``"BertModel"`` checkpoints (sentence-embedding models): no ``bert.`` prefix, a pooler."""
    import torch

    reference = save_random("BertModel", "BertConfig", tmp_path / "bare", seed=2, **CONFIG)
    model = from_pretrained(tmp_path / "bare")
    assert isinstance(model, BertModel) and model.pooler is not None
    ids, mask, types = batch(rng)
    with torch.no_grad():
        out = reference(torch.as_tensor(ids), torch.as_tensor(mask), torch.as_tensor(types))
    hidden = run(model, ids, mask, types)
    assert_logits(hidden, out.last_hidden_state.numpy())
    assert_logits(model.pooled(hidden), out.pooler_output.numpy())
    model.save_pretrained(tmp_path / "again")
    again = import_transformers().BertModel.from_pretrained(str(tmp_path / "again")).eval()
    with torch.no_grad():
        np.testing.assert_allclose(
            again(torch.as_tensor(ids)).last_hidden_state.numpy(), out_ids(reference, ids), rtol=1e-6, atol=1e-6
        )


def out_ids(reference, ids):
    import torch

    with torch.no_grad():
        return reference(torch.as_tensor(ids)).last_hidden_state.numpy()


def test_heads_over_a_bare_checkpoint_and_the_encoder_of_a_heads_checkpoint(checkpoints, tmp_path, rng):
    """As transformers' base_model_prefix: the ``bert.`` prefix is added or dropped."""
    save_random("BertModel", "BertConfig", tmp_path / "bare", seed=2, **CONFIG)
    bare = from_pretrained(tmp_path / "bare")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        head = BertForSequenceClassification.from_pretrained(tmp_path / "bare")
    report = [str(w.message) for w in caught if isinstance(w.message, LoadReport)]
    assert report and "classifier.weight" in report[0] and "bert." not in report[0].split("not used")[-1]
    ids, mask, types = batch(rng)
    np.testing.assert_array_equal(run(head.bert, ids, mask, types).to_numpy(), run(bare, ids, mask, types).to_numpy())
    directory, masked_lm = checkpoints["mlm"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        encoder = BertModel.from_pretrained(directory)
    import torch

    with torch.no_grad():
        expected = masked_lm.bert(torch.as_tensor(ids), torch.as_tensor(mask), torch.as_tensor(types))
    assert_logits(run(encoder, ids, mask, types), expected.last_hidden_state.numpy())
    report = [str(w.message) for w in caught if isinstance(w.message, LoadReport)]
    assert report and "cls.predictions" in report[0] and "pooler.dense.weight" in report[0]
