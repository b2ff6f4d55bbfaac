"""Fine-tuning GPT-2 from a transformers checkpoint: 20 AdamW steps of ember against the
same steps of the torch model, loss by loss."""

from __future__ import annotations

import numpy as np

from ember import Device, Tensor
from ember.models import from_pretrained
from ember.nn.loss import CrossEntropyLoss
from ember.optim import AdamWConfig, GradientsParams
from tests.models.hf import save_random

CONFIG = dict(
    vocab_size=61, n_positions=16, n_embd=24, n_layer=2, n_head=3, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
)
LR, DECAY, STEPS = 1e-3, 0.01, 20


def test_twenty_adamw_steps_match_torch_step_by_step(tmp_path, rng):
    import torch

    reference = save_random("GPT2LMHeadModel", "GPT2Config", tmp_path, **CONFIG).train()
    tokens = rng.integers(0, CONFIG["vocab_size"], size=(4, 9))
    inputs, targets = tokens[:, :-1], tokens[:, 1:].reshape(-1)

    optimizer = torch.optim.AdamW(reference.parameters(), lr=LR, weight_decay=DECAY, eps=1e-8)
    theirs = []
    for _ in range(STEPS):
        logits = reference(torch.as_tensor(inputs)).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, CONFIG["vocab_size"]), torch.as_tensor(targets))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        theirs.append(loss.item())

    device = Device.flex().autodiff()
    model = from_pretrained(tmp_path, device=device)
    optim, loss_fn = AdamWConfig(weight_decay=DECAY, epsilon=1e-8).init(), CrossEntropyLoss()
    x, y = Tensor.from_data(inputs, device=device), Tensor.from_data(targets, device=device)
    ours = []
    for _ in range(STEPS):
        logits = model(x)
        loss = loss_fn.forward(logits.reshape([-1, CONFIG["vocab_size"]]), y)
        ours.append(loss.into_scalar())
        model = optim.step(LR, model, GradientsParams.from_grads(loss.backward(), model))

    np.testing.assert_allclose(ours, theirs, rtol=1e-4)
    assert ours[-1] < ours[0]
    with torch.no_grad():
        final = reference(torch.as_tensor(inputs)).logits.numpy()
    np.testing.assert_allclose(model.valid()(Tensor.from_data(inputs)).to_numpy(), final, rtol=1e-4, atol=1e-4)
