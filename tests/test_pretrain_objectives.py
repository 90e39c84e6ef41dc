"""The objectives on a tiny BERT: one decoder layer, the loss can fall, and DupMAE's bag-of-words loss is right."""

from __future__ import annotations

import math

import pytest
import torch
from transformers.models.bert.modeling_bert import BertLayer

from embedkit.pretrain.collator import PretrainCollator, bag_of_words
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


def test_bag_of_words_target_and_loss_follow_the_reference():
    vocab, ids = 50, torch.tensor([[1, 7, 9, 7, 2, 0], [1, 4, 2, 0, 0, 0]])
    ordinary = torch.tensor([[0, 1, 1, 1, 0, 0], [0, 1, 0, 0, 0, 0]], dtype=torch.bool)
    bag = bag_of_words(ids, ordinary, vocab)
    # the reference: weight[t] = 1 / n for each token t of a text of n tokens (a repeated token is not summed)
    assert bag[0, 7].item() == pytest.approx(1 / 3) and bag[0, 9].item() == pytest.approx(1 / 3)
    assert bag[1, 4].item() == 1.0 and (bag > 0).sum().item() == 3
    uniform = torch.zeros(2, 6, vocab)
    assert bag_of_words_loss(uniform, bag, ordinary).item() == pytest.approx((2 / 3 + 1) / 2 * math.log(vocab))
    right = torch.zeros(2, 6, vocab)
    right[0, 1, 7] = right[0, 2, 9] = right[1, 1, 4] = 30.0  # each bag token peaks at some ordinary position
    assert bag_of_words_loss(right, bag, ordinary).item() == pytest.approx((2 / 3 * math.log(2) + 0.0) / 2, abs=1e-3)
    wrong = torch.zeros(2, 6, vocab)
    wrong[:, 1, 30] = 30.0
    assert bag_of_words_loss(wrong, bag, ordinary).item() > bag_of_words_loss(uniform, bag, ordinary).item()
    ignored = right.clone()
    ignored[:, 0, 30] = ignored[:, 4, 30] = ignored[1, 5, 30] = 100.0  # [CLS], [SEP], padding: not pooled
    assert bag_of_words_loss(ignored, bag, ordinary).item() == pytest.approx(
        bag_of_words_loss(right, bag, ordinary).item(), abs=1e-6
    )
    logits = torch.zeros(2, 6, vocab, requires_grad=True)
    bag_of_words_loss(logits, bag, ordinary).backward()
    assert logits.grad[~ordinary].abs().sum() == 0 and logits.grad[ordinary].abs().sum() > 0


def test_dupmae_adds_its_three_losses(tiny_bert, examples):
    model, tokenizer = build("dupmae", "enhanced", tiny_bert)
    assert model.bow_weight == 0.1  # the reference's default
    model.bow_weight = 0.5
    collator = PretrainCollator(tokenizer, "dupmae", Masker("random"), 0.3, 0.5, seed=4)
    batch = collator([examples[i] for i in range(4)])
    model.eval()
    with torch.no_grad():
        out = model(**batch)
    assert set(out) == {"loss", "encoder_loss", "decoder_loss", "bow_loss"}
    total = out["encoder_loss"] + out["decoder_loss"] + 0.5 * out["bow_loss"]
    assert out["loss"].item() == pytest.approx(total.item(), rel=1e-6)
    near_uniform = batch["bag_of_words"].sum(-1).mean().item() * math.log(len(tokenizer))  # untrained
    assert out["bow_loss"].item() == pytest.approx(near_uniform, rel=0.05)


def test_an_enhanced_decoding_row_sees_neither_itself_nor_masked_positions(tiny_bert, examples):
    """Perturb what row i must not see (its own token, the positions its mask hides): its output stays; perturb a
    position it sees: its output changes (so the test can fail)."""
    torch.manual_seed(0)
    model, tokenizer = build("retromae", "enhanced", tiny_bert)
    model.eval()
    collator = PretrainCollator(tokenizer, "retromae", Masker("random"), 0.3, 0.5, seed=1)
    batch = collator([examples[0]])
    ids, visible = batch["input_ids"], batch["decoder_attention"]
    embedding = torch.randn(1, model.encoder.config.hidden_size)
    with torch.no_grad():
        before = model.decode_enhanced(embedding, ids, visible)
    length, checked = int(batch["attention_mask"].sum()), 0
    for row in range(1, length - 1):
        hidden = [j for j in range(1, length) if not visible[0, row, j]]  # itself and what its mask hides
        seen = [j for j in range(1, length) if visible[0, row, j]]
        assert row in hidden and seen
        perturbed = ids.clone()
        perturbed[0, hidden] = tokenizer.convert_tokens_to_ids("zebra")
        with torch.no_grad():
            after = model.decode_enhanced(embedding, perturbed, visible)
        assert torch.allclose(after[0, row], before[0, row], atol=1e-6), f"row {row} saw a hidden position"
        perturbed = ids.clone()
        perturbed[0, seen] = tokenizer.convert_tokens_to_ids("zebra")
        with torch.no_grad():
            changed = model.decode_enhanced(embedding, perturbed, visible)
        assert not torch.allclose(changed[0, row], before[0, row], atol=1e-4), f"row {row} ignored what it sees"
        checked += 1
    assert checked >= 10


def test_the_decoder_is_conditioned_on_the_sentence_pooling(tiny_bert):
    encoder, _, _ = load_encoder(str(tiny_bert))
    model = RetroMAE(encoder, "enhanced", pooling="mean")
    hidden = torch.randn(2, 5, 64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    pooled = model.sentence_embedding(hidden, mask)
    assert torch.allclose(pooled[0], hidden[0, :3].mean(0)) and torch.allclose(pooled[1], hidden[1].mean(0))
    model.pooling = "cls"
    assert torch.equal(model.sentence_embedding(hidden, mask), hidden[:, 0])


@pytest.mark.parametrize("dense_pooling", ["cls", "mean"])
def test_dupmae_pooling_matches_a_hand_computation(dense_pooling):
    from embedkit.models.dupmae_pooling import DupMAEPooling

    torch.manual_seed(0)
    hidden, vocab, reduced = 8, 50, 6
    module = DupMAEPooling(hidden, vocab, reduced_dim=reduced, dense_pooling=dense_pooling).eval()
    tokens = torch.randn(2, 5, hidden)
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    with torch.no_grad():
        got = module({"token_embeddings": tokens, "attention_mask": mask})["sentence_embedding"]
    for row, length in enumerate(mask.sum(1).tolist()):
        states = tokens[row, :length]
        dense = states[0] if dense_pooling == "cls" else states.mean(0)
        with torch.no_grad():
            logits = module.head(states[1 : length - 1])  # ordinary tokens: not [CLS], not [SEP]
        per_term = [max(math.log1p(max(float(logits[p, v]), 0.0)) for p in range(len(logits))) for v in range(vocab)]
        groups = [(g * vocab // reduced, -(-(g + 1) * vocab // reduced)) for g in range(reduced)]
        expected = dense.tolist() + [max(per_term[a:b]) for a, b in groups]
        assert got[row].tolist() == pytest.approx(expected, abs=1e-5)
    assert module.get_embedding_dimension() == hidden + reduced
