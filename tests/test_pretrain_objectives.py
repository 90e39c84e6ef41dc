"""The objectives on a tiny BERT: one decoder layer, the loss can fall, and DupMAE's bag-of-words loss is right."""

from __future__ import annotations

import math

import pytest
import torch
from transformers.models.bert.modeling_bert import BertLayer

from embedkit.pretrain.collator import PretrainCollator
from embedkit.pretrain.data import load_texts, tokenize
from embedkit.pretrain.dupmae import DupMAE, bag_of_words_loss
from embedkit.pretrain.encoder import load_encoder
from embedkit.pretrain.masking import Masker
from embedkit.pretrain.mlm import MaskedLM
from embedkit.pretrain.retromae import RetroMAE

CASES = [("mlm", "plain"), ("retromae", "plain"), ("retromae", "enhanced"), ("dupmae", "enhanced")]


def build(objective: str, decoder: str, tiny_bert) -> tuple[torch.nn.Module, object]:
    encoder, tokenizer, _ = load_encoder(str(tiny_bert))
    if objective == "mlm":
        return MaskedLM(encoder), tokenizer
    if objective == "dupmae":
        return DupMAE(encoder, decoder), tokenizer
    return RetroMAE(encoder, decoder), tokenizer


@pytest.fixture(scope="module")
def examples(scifact_subset, tiny_bert):
    _, tokenizer, _ = load_encoder(str(tiny_bert))
    texts, _ = load_texts(scifact_subset, limit=4)
    return tokenize(texts, tokenizer, 32)


@pytest.mark.parametrize("decoder", ["plain", "enhanced"])
@pytest.mark.parametrize("objective", ["retromae", "dupmae"])
def test_the_decoder_is_exactly_one_transformer_layer(objective, decoder, tiny_bert):
    model, _ = build(objective, decoder, tiny_bert)
    encoder_layers = sum(isinstance(m, BertLayer) for m in model.encoder.modules())
    assert isinstance(model.decoder, BertLayer)
    assert sum(isinstance(m, BertLayer) for m in model.decoder.modules()) == 1
    assert encoder_layers == model.encoder.config.num_hidden_layers == 2
    assert sum(isinstance(m, BertLayer) for m in model.modules()) == encoder_layers + 1


@pytest.mark.parametrize(("objective", "decoder"), CASES)
def test_loss_falls_by_more_than_half_on_a_fixed_batch(objective, decoder, tiny_bert, examples):
    torch.manual_seed(0)
    model, tokenizer = build(objective, decoder, tiny_bert)
    collator = PretrainCollator(tokenizer, objective, Masker("whole_word"), 0.3, 0.5, decoder=decoder, seed=0)
    batch = collator([examples[i] for i in range(len(examples))])
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    model.train()
    losses = []
    for _ in range(300):
        loss = model(**batch)["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if len(losses) >= 10 and sum(losses[-5:]) / 5 < losses[0] / 2:
            break
    assert sum(losses[-5:]) / 5 < losses[0] / 2, f"{objective}/{decoder}: {losses[0]:.2f} -> {losses[-1]:.2f}"


def test_bag_of_words_loss_scores_the_bag_of_ordinary_tokens():
    vocab, ids = 50, torch.tensor([[1, 7, 9, 7, 2, 0], [1, 4, 2, 0, 0, 0]])
    ordinary = torch.tensor([[0, 1, 1, 1, 0, 0], [0, 1, 0, 0, 0, 0]], dtype=torch.bool)
    uniform = torch.zeros(2, 6, vocab)
    assert bag_of_words_loss(uniform, ids, ordinary).item() == pytest.approx(math.log(vocab), rel=1e-5)
    right = torch.zeros(2, 6, vocab)
    right[0, 1, 7] = right[0, 2, 9] = right[1, 1, 4] = 30.0  # each bag token peaks at some ordinary position
    # bags {7, 9} and {4}: the best possible loss is the entropy of the uniform bag distribution
    assert bag_of_words_loss(right, ids, ordinary).item() == pytest.approx((math.log(2) + 0.0) / 2, abs=1e-3)
    wrong = torch.zeros(2, 6, vocab)
    wrong[:, 1, 30] = 30.0
    assert bag_of_words_loss(wrong, ids, ordinary).item() > math.log(vocab)
    ignored = right.clone()
    ignored[:, 0, 30] = ignored[:, 4, 30] = ignored[1, 5, 30] = 100.0  # [CLS], [SEP], padding: not pooled
    assert bag_of_words_loss(ignored, ids, ordinary).item() == pytest.approx(
        bag_of_words_loss(right, ids, ordinary).item(), abs=1e-6
    )
    logits = torch.zeros(2, 6, vocab, requires_grad=True)
    bag_of_words_loss(logits, ids, ordinary).backward()
    assert logits.grad[~ordinary].abs().sum() == 0 and logits.grad[ordinary].abs().sum() > 0


def test_dupmae_adds_its_three_losses(tiny_bert, examples):
    model, tokenizer = build("dupmae", "enhanced", tiny_bert)
    model.bow_weight = 0.5
    collator = PretrainCollator(tokenizer, "dupmae", Masker("random"), 0.3, 0.5, seed=4)
    model.eval()
    with torch.no_grad():
        out = model(**collator([examples[i] for i in range(4)]))
    assert set(out) == {"loss", "encoder_loss", "decoder_loss", "bow_loss"}
    total = out["encoder_loss"] + out["decoder_loss"] + 0.5 * out["bow_loss"]
    assert out["loss"].item() == pytest.approx(total.item(), rel=1e-6)
    assert out["bow_loss"].item() == pytest.approx(math.log(len(tokenizer)), rel=0.05)  # untrained: near uniform
