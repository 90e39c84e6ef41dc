"""The README card of a pretrained encoder: what it is, how it loads, and every setting that made it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedkit.training.transfer import transfer_card_lines


def _overlap(overlap: int | None) -> str:
    return "longer texts cut" if overlap is None else f"longer texts in windows overlapping by {overlap} tokens"


def _number(value: float | None) -> str:
    return "not logged" if value is None else f"{value:.4f}"


def _dev_lines(curve: list[dict[str, float]]) -> list[str]:
    """The dev evaluation during pretraining, as a table of the card."""
    if not curve:
        return []
    metrics = [key for key in curve[0] if key != "step"]
    lines = ["", "Dev evaluation during pretraining (the sentence pooling, exact search, trec_eval metrics):", ""]
    lines += ["| step | " + " | ".join(metrics) + " |", "| --- |" + " --- |" * len(metrics)]
    lines += [f"| {row['step']} | " + " | ".join(f"{row[m]:.4f}" for m in metrics) + " |" for row in curve]
    return lines


def card(record: dict[str, Any]) -> str:
    config = record["config"]
    rows = [f"| {k} | `{v!r}` |" for k, v in config.items()]
    papers = {
        "retromae": "RetroMAE (Xiao et al., 2022)",
        "dupmae": "DupMAE (Xiao et al., 2023)",
        "mlm": "masked language modelling (Devlin et al., 2019)",
        "tsdae": "TSDAE (Wang et al., 2021), sentence-transformers' DenoisingAutoEncoderLoss",
    }
    pooling = "dupmae" if config["objective"] == "dupmae" else config["sentence_pooling"]
    lines = [
        f"# {Path(config['output']).name}",
        "",
        "A BERT-like encoder after retrieval-oriented pretraining with embedkit. `embedkit.load_model(path)` loads it "
        f"with {pooling} pooling{' and normalised vectors' if config['normalize'] else ''}, as it was trained; "
        "fine-tune it with `embedkit train --model path`.",
        "",
        "## embedkit pretraining",
        "",
        f"- objective: {config['objective']}, {papers[config['objective']]}",
        f"- masks: {record['masks']}",
        f"- steps: {record['steps']}; batch size {config['batch_size']}; max length {config['max_length']}",
        f"- corpus: {record['corpus']}; {record['texts']} texts, {record['chunks']} chunks of at most "
        f"{config['max_length']} tokens ({_overlap(config['chunk_overlap'])})",
        f"- sentence vector: {config['sentence_pooling']} pooling; normalised when loaded: {config['normalize']}",
        f"- learning rate: encoder {config['learning_rate']}, head and decoder {config['head_learning_rate']}; "
        f"head warm-up: {config['head_warmup_steps']} steps with the encoder frozen",
        f"- started from: {record['base_model']}" + (" (random init)" if config["model_config"] else ""),
        f"- wall time: {record['train_seconds']:.0f} s; {record['tokens_per_second']:.0f} tokens/s",
        f"- logged loss: first {_number(record['first_loss'])}, last {_number(record['last_loss'])}",
        *_dev_lines(record.get("dev_curve") or []),
        *transfer_card_lines(record.get("transfer")),
        "",
        "| setting | value |",
        "| --- | --- |",
        *rows,
        "",
    ]
    return "\n".join(lines)
