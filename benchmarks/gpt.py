"""The small character-level GPT of workload W4 (``benchmarks/train_step.py``) in
ember, and its PyTorch twin written as a PyTorch user writes one (separate q/k/v
projections, ``scaled_dot_product_attention`` with ``is_causal``), given the ember
model's weights."""

from __future__ import annotations

import numpy as np

from ember import Device, Module, Tensor
from ember.nn import Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig
from ember.nn.attention import generate_autoregressive_mask
from ember.nn.transformer import TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput

D_MODEL, N_HEADS, N_LAYERS = 128, 4, 3


class Gpt(Module):
    """Token and position embeddings, pre-norm transformer blocks with a causal mask,
    a final layer norm and a linear head to the vocabulary."""

    tok: Embedding
    pos: Embedding
    blocks: TransformerEncoder
    norm: LayerNorm
    head: Linear

    def forward(self, idx: Tensor) -> Tensor:
        batch, block = idx.dims()
        x = self.tok(idx).add(self.pos(Tensor.arange(block, device=idx.device)))
        mask = generate_autoregressive_mask(batch, block, device=idx.device)
        return self.head(self.norm(self.blocks(TransformerEncoderInput(x).with_mask_attn(mask))))


def ember_gpt(device: Device, *, vocab: int, block: int, dropout: float = 0.0) -> Gpt:
    return Gpt(
        tok=EmbeddingConfig(vocab, D_MODEL).init(device),
        pos=EmbeddingConfig(block, D_MODEL).init(device),
        blocks=TransformerEncoderConfig(D_MODEL, 4 * D_MODEL, N_HEADS, N_LAYERS, dropout=dropout, norm_first=True).init(
            device
        ),
        norm=LayerNormConfig(D_MODEL).init(device),
        head=LinearConfig(D_MODEL, vocab).init(device),
    )


def torch_twin(torch, model: Gpt):
    """The same network in PyTorch, with ``model``'s weights copied in."""
    nn, F = torch.nn, torch.nn.functional
    d, heads = D_MODEL, N_HEADS

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            h = self.ln1(x)
            b, t, _ = h.shape

            def split(z):
                return z.view(b, t, heads, d // heads).transpose(1, 2)

            a = F.scaled_dot_product_attention(split(self.q(h)), split(self.k(h)), split(self.v(h)), is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class TorchGpt(nn.Module):
        def __init__(self, vocab, block):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
            self.blocks = nn.ModuleList(Block() for _ in range(N_LAYERS))
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.norm(x))

    vocab, block = model.tok.weight.lazy_shape()[0], model.pos.weight.lazy_shape()[0]
    net = TorchGpt(vocab, block)
    params = {path: np.asarray(p.val().to_data().to_numpy()) for path, p in model.named_params()}

    def put(target, name, transpose=False):
        value = params[name].T if transpose else params[name]
        with torch.no_grad():
            target.copy_(torch.from_numpy(np.ascontiguousarray(value)))

    def linear(target, prefix):
        put(target.weight, f"{prefix}.weight", transpose=True)
        put(target.bias, f"{prefix}.bias")

    def norm(target, prefix):
        put(target.weight, f"{prefix}.gamma")
        put(target.bias, f"{prefix}.beta")

    put(net.tok.weight, "tok.weight")
    put(net.pos.weight, "pos.weight")
    for i, blk in enumerate(net.blocks):
        prefix = f"blocks.layers.{i}"
        norm(blk.ln1, f"{prefix}.norm_1")
        norm(blk.ln2, f"{prefix}.norm_2")
        for mine, theirs in (("query", blk.q), ("key", blk.k), ("value", blk.v), ("output", blk.o)):
            linear(theirs, f"{prefix}.mha.{mine}")
        linear(blk.fc1, f"{prefix}.pwff.linear_inner")
        linear(blk.fc2, f"{prefix}.pwff.linear_outer")
    norm(net.norm, "norm")
    linear(net.head, "head")
    return net
