"""The PyTorch models the import tests export (built with the torch module passed in,
so that importing this file needs no torch)."""

from __future__ import annotations

from typing import Any


def seeded(torch: Any, seed: int = 0) -> None:
    torch.manual_seed(seed)


def mlp(torch: Any) -> Any:
    seeded(torch, 1)
    nn = torch.nn
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))


def small_cnn(torch: Any, image: int = 28) -> Any:
    """benchmarks/train_step.py's W3 network (for 28x28 inputs; 8x8 digits give a 128-wide head)."""
    seeded(torch, 2)
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * (image // 4) ** 2, 10),
    )


def randomize_norms(torch: Any, model: Any) -> Any:
    """Pretrained-looking norm layers: weights, biases and running statistics that are
    not the fresh ones (fresh ones are equal across layers, which exporters deduplicate)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.BatchNorm2d, torch.nn.LayerNorm)):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
    return model


def resnet(torch: Any) -> Any:
    """A stem, one ResNet basic block with a strided 1x1 projection, pooling and a head."""
    seeded(torch, 3)
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, c_in: int, c_out: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(c_out)
            self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(c_out)
            self.down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + self.down(x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
            self.block = Block(8, 16, 2)
            self.head = nn.Linear(16, 5)

        def forward(self, x):
            y = self.block(self.stem(x))
            return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))

    return randomize_norms(torch, Net())


def encoder(torch: Any, randomize: bool = True) -> Any:
    """``torch.nn.TransformerEncoderLayer`` (batch first), wrapped so that torch's
    exporter calls it without its keyword arguments."""
    seeded(torch, 4)
    nn = torch.nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)

        def forward(self, x):
            return self.layer(x)

    model = Encoder()
    return randomize_norms(torch, model) if randomize else model


def masked_attention(torch: Any) -> Any:
    """Token embeddings, a causal self-attention block with GELU feed-forward, and a head:
    the attention patterns of decoder exports (Gather, Trilu/Where masks, Softmax)."""
    seeded(torch, 5)
    nn = torch.nn

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(20, 16)
            self.pos = nn.Parameter(torch.randn(8, 16) * 0.1)
            self.qkv = nn.Linear(16, 48)
            self.out = nn.Linear(16, 16)
            self.norm = nn.LayerNorm(16)
            self.ff = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
            self.head = nn.Linear(16, 20)

        def forward(self, tokens):
            b, t = tokens.shape
            x = self.embed(tokens) + self.pos[:t]
            q, k, v = self.qkv(self.norm(x)).reshape(b, t, 3, 2, 8).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-1, -2) / 8**0.5
            mask = torch.ones(t, t, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
            y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, 16)
            x = x + self.out(y)
            return self.head(x + self.ff(x))

    return randomize_norms(torch, Tiny())


TRANSFORMERS = ("gpt2", "llama", "bert", "vit", "t5")


def transformer(torch: Any, transformers: Any, kind: str) -> tuple[Any, tuple[Any, ...]]:
    """A tiny random ``transformers`` model wrapped to return its logits, and example
    inputs: GPT-2, LLaMA (grouped-query, rotary), BERT (masked LM), ViT (image
    classification) or T5 (encoder-decoder; two inputs). Language models get an all-ones
    attention mask (without one, transformers' mask code calls ``torch.diff``, which the
    TorchScript exporter lacks)."""
    seeded(torch, 6)
    t = transformers
    nn = torch.nn
    args: tuple[Any, ...] = (torch.randint(0, 97, (2, 8)),)
    if kind == "gpt2":
        config = t.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=97, n_positions=16, use_cache=False)
        model = t.GPT2LMHeadModel(config)
    elif kind == "llama":
        config = t.LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=97,
            max_position_embeddings=16,
            use_cache=False,
        )
        model = t.LlamaForCausalLM(config)
    elif kind == "bert":
        config = t.BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=97,
            max_position_embeddings=16,
        )  # fmt: skip
        model = t.BertForMaskedLM(config)
    elif kind == "vit":
        config = t.ViTConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=16,
            patch_size=4, num_labels=5,
        )  # fmt: skip
        model = t.ViTForImageClassification(config)
        args = (torch.randn(2, 3, 16, 16),)
    elif kind == "t5":
        config = t.T5Config(
            vocab_size=97, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
            relative_attention_num_buckets=8, use_cache=False,
        )  # fmt: skip
        model = t.T5ForConditionalGeneration(config)
        args = (torch.randint(0, 97, (2, 8)), torch.randint(0, 97, (2, 6)))
    else:
        raise ValueError(kind)

    class Logits(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x, decoder_ids=None):
            if kind == "vit":
                return self.m(pixel_values=x).logits
            if kind == "t5":
                return self.m(input_ids=x, decoder_input_ids=decoder_ids).logits
            return self.m(input_ids=x, attention_mask=torch.ones_like(x)).logits

    return Logits().eval(), args
