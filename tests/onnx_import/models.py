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
