"""Masking policies on real SciFact text: ratios, word integrity, IDF preference, BERT corruption, decoder masks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from embedkit.pretrain.collator import PretrainCollator
from embedkit.pretrain.data import corpus_idf, load_texts, tokenize
from embedkit.pretrain.masking import POLICIES, Masker, corrupt


@pytest.fixture(scope="module")
def tokenizer(tiny_bert):
    return AutoTokenizer.from_pretrained(tiny_bert)


@pytest.fixture(scope="module")
def corpus(scifact_path, tokenizer):
    """All of SciFact tokenised (128 tokens), as the pretraining data module does it."""
    texts, _ = load_texts(scifact_path)
    return tokenize(texts, tokenizer, 128)


@pytest.fixture(scope="module")
def idf(corpus, tokenizer):
    return corpus_idf(corpus, len(tokenizer))


def _arrays(example, tokenizer):
    ids = np.asarray(example["input_ids"])
    maskable = ~np.isin(ids, tokenizer.all_special_ids)
    return ids, np.asarray(example["word_starts"]), maskable


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("ratio", [0.15, 0.30, 0.50, 0.70])
def test_measured_mask_ratio_matches_the_configured_ratio(policy, ratio, corpus, tokenizer, idf):
    masker, rng = Masker(policy, idf=idf), np.random.default_rng(0)
    measured = []
    for example in corpus.select(range(150)):
        ids, starts, maskable = _arrays(example, tokenizer)
        mask = masker.select(ids, starts, maskable, ratio, rng)
        assert not mask[~maskable].any(), "a special token was masked"
        measured.append(mask.sum() / maskable.sum())
        if maskable.sum() >= 60:
            assert abs(measured[-1] - ratio) <= 0.05
    assert abs(np.mean(measured) - ratio) <= 0.01


def test_collated_encoder_and_decoder_ratios_fall_in_retromae_ranges_and_masks_differ(corpus, tokenizer):
    collator = PretrainCollator(tokenizer, "retromae", Masker("whole_word"), 0.2, 0.6, decoder="plain", seed=1)
    batch = collator([corpus[i] for i in range(32)])
    ordinary = (batch["attention_mask"].bool()) & ~torch.isin(
        batch["input_ids"], torch.tensor(tokenizer.all_special_ids)
    )
    encoder = batch["encoder_labels"] != -100
    decoder = batch["decoder_labels"] != -100
    encoder_ratio = encoder.sum() / ordinary.sum()
    decoder_ratio = decoder.sum() / ordinary.sum()
    assert 0.15 <= encoder_ratio <= 0.30 and 0.50 <= decoder_ratio <= 0.70
    assert all(not torch.equal(e, d) for e, d in zip(encoder, decoder))
    # drawn independently: the overlap is about the product of the two ratios, not the smaller one
    overlap = (encoder & decoder).sum() / ordinary.sum()
    assert abs(overlap - encoder_ratio * decoder_ratio) < 0.05
    assert torch.equal(batch["input_ids"][~encoder], batch["encoder_input_ids"][~encoder])


@pytest.mark.parametrize("policy", ["whole_word", "span"])
def test_word_policies_never_split_a_word(policy, scifact, tokenizer):
    masker, rng = Masker(policy), np.random.default_rng(3)
    texts = [row["title"] + " " + row["text"] for row in scifact.corpus.select(range(120))]
    split_words = 0
    for text in texts:
        encoded = tokenizer(text, truncation=True, max_length=128)
        ids = np.asarray(encoded["input_ids"])
        word_ids = encoded.word_ids()
        starts = np.asarray([int(w is None or i == 0 or w != word_ids[i - 1]) for i, w in enumerate(word_ids)])
        mask = masker.select(ids, starts, ~np.isin(ids, tokenizer.all_special_ids), 0.3, rng)
        words: dict[int, list[bool]] = {}
        for position, word in enumerate(word_ids):
            if word is not None:
                words.setdefault(word, []).append(bool(mask[position]))
        split_words += sum(len(set(flags)) > 1 for flags in words.values())
        assert mask.any()
    assert split_words == 0
    assert any(len(tokenizer.tokenize(w)) > 1 for w in texts[0].split()), "the check needs multi-piece words"


def test_idf_masking_masks_rare_terms_more_often_than_common_ones(corpus, tokenizer, idf):
    def rates(policy: str) -> tuple[float, float]:
        masker, rng = Masker(policy, idf=idf), np.random.default_rng(5)
        occurrences, masked = [], []
        for example in corpus.select(range(400)):
            ids, starts, maskable = _arrays(example, tokenizer)
            mask = masker.select(ids, starts, maskable, 0.3, rng)
            occurrences.append(idf[ids[maskable]])
            masked.append(mask[maskable])
        weights, hits = np.concatenate(occurrences), np.concatenate(masked)
        low, high = np.quantile(weights, [1 / 3, 2 / 3])
        return hits[weights >= high].mean(), hits[weights <= low].mean()

    high, low = rates("idf")
    assert high > 1.5 * low, (high, low)
    control_high, control_low = rates("random")
    assert 0.8 < control_high / control_low < 1.25
    assert idf[tokenizer.convert_tokens_to_ids("the")] < idf[tokenizer.convert_tokens_to_ids("aspirin")]


def test_corruption_is_80_10_10_and_labels_only_masked_positions():
    ids = torch.randint(1000, 2000, (200, 100))
    mask = torch.rand(ids.shape, generator=torch.Generator().manual_seed(0)) < 0.5
    corrupted, labels = corrupt(ids, mask, 103, 30522, torch.Generator().manual_seed(1))
    assert torch.equal(labels[mask], ids[mask]) and (labels[~mask] == -100).all()
    assert torch.equal(corrupted[~mask], ids[~mask])
    n = mask.sum().item()
    as_mask = (corrupted[mask] == 103).sum().item() / n
    unchanged = (corrupted[mask] == ids[mask]).sum().item() / n
    assert abs(as_mask - 0.8) < 0.02 and abs(unchanged - 0.1) < 0.02 and abs(1 - as_mask - unchanged - 0.1) < 0.02


def test_enhanced_decoding_masks_are_position_specific(corpus, tokenizer):
    collator = PretrainCollator(tokenizer, "retromae", Masker("random"), 0.3, 0.6, decoder="enhanced", seed=2)
    examples = [corpus[i] for i in range(4)]
    batch = collator(examples)
    visible, attention = batch["decoder_attention"], batch["attention_mask"].bool()
    length = visible.shape[-1]
    assert visible.shape == (4, length, length)
    assert not visible.diagonal(dim1=1, dim2=2).any(), "a position saw itself"
    assert visible[:, :, 0][:, 1:].all(), "the [CLS] slot must always be visible"
    assert not visible[~attention[:, None, :].expand_as(visible)].any(), "padding was visible"
    ordinary = attention & ~torch.isin(batch["input_ids"], torch.tensor(tokenizer.all_special_ids))
    seen = (visible & ordinary[:, None, :]).sum(-1)[ordinary].float() / ordinary.sum(-1, keepdim=True).expand_as(
        ordinary
    )[ordinary]
    assert abs(seen.mean().item() - 0.4) < 0.03  # 60 % hidden per row, about
    rows = visible[0, 1 : int(attention[0].sum()) - 1]
    assert len({tuple(r.tolist()) for r in rows}) > 1, "every row had the same mask"
    assert torch.equal(batch["decoder_labels"][ordinary], batch["input_ids"][ordinary])


def test_long_texts_become_overlapping_windows_that_cover_the_text(scifact_path, tokenizer):
    texts, _ = load_texts(scifact_path, limit=50)
    windows = tokenize(texts, tokenizer, 64, overlap=16)
    cut = tokenize(texts, tokenizer, 64)
    assert len(cut) == 50 and len(windows) > 2 * len(cut)
    assert list(windows["example"]) == list(range(len(windows)))
    first = tokenizer(texts[0]["text"], add_special_tokens=False)["input_ids"]
    rows = [r["input_ids"][1:-1] for r in tokenize(texts.select(range(1)), tokenizer, 64, overlap=16)]
    assert len(rows) > 1 and all(len(r) <= 62 for r in rows)
    for before, after in itertools.pairwise(rows):
        assert before[-16:] == after[:16], "consecutive windows share 16 tokens"
    rebuilt = rows[0] + [token for row in rows[1:] for token in row[16:]]
    assert rebuilt == first, "the windows cover the whole text, in order"


def test_masks_depend_on_the_seed_and_the_batch_not_on_earlier_calls(corpus, tokenizer):
    """A resumed run masks its remaining batches as an uninterrupted run would."""
    examples = [corpus[i] for i in range(4)]
    other = [corpus[i] for i in range(4, 8)]

    def collate(batches, seed=3):
        collator = PretrainCollator(tokenizer, "retromae", Masker("whole_word"), 0.3, 0.5, seed=seed)
        return [collator(batch) for batch in batches][-1]

    fresh, after_another = collate([examples]), collate([other, examples])
    for key in fresh:
        assert torch.equal(fresh[key], after_another[key]), key
    assert not torch.equal(fresh["encoder_input_ids"], collate([examples], seed=4)["encoder_input_ids"])


def test_tsdae_batches_delete_words_from_the_input_only(corpus, tokenizer):
    collator = PretrainCollator(tokenizer, "tsdae", Masker("random"), 0.3, seed=0, deletion_ratio=0.6, max_length=128)
    batch = collator([corpus[i] for i in range(8)])
    source = batch["source_attention_mask"].sum(1).float()
    target = batch["target_attention_mask"].sum(1).float()
    assert 0.3 < (source / target).mean().item() < 0.55  # 60 % of words gone (words are 1+ tokens)
    originals = tokenizer.batch_decode(batch["target_input_ids"], skip_special_tokens=True)
    assert originals == tokenizer.batch_decode([corpus[i]["input_ids"] for i in range(8)], skip_special_tokens=True)
    for damaged, original in zip(
        tokenizer.batch_decode(batch["source_input_ids"], skip_special_tokens=True), originals
    ):
        words = iter(original.split())
        assert all(any(word == kept for word in words) for kept in damaged.split()), "kept words, in order"
