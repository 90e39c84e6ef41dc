"""Where a training run writes, so that no rerun silently resumes another run and no kill leaves a half-saved model.

- Checkpoints go to ``OUTPUT.partial/checkpoints``, beside a ``run.json`` holding the run's settings.
- A rerun with the same settings resumes from the last checkpoint. One with other settings is refused, unless it
  says ``resume`` (continue that run; the changed settings are recorded) or ``overwrite`` (start again).
- The finished model is saved into ``OUTPUT.partial/model`` and swapped into ``OUTPUT`` in one step
  (``storage.commit_folder``); then the partial folder is deleted. A kill at any instant leaves ``OUTPUT`` as it
  was or as the finished model, never a mix.
- An existing ``OUTPUT`` is replaced only with ``overwrite``; when it already holds the model these settings make,
  the run is done and nothing is trained.

``train`` and ``pretrain`` share it (kinds ``model`` and ``encoder``).
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embedkit.errors import EmbedkitError
from embedkit.outputs import check_output_folder, commit_folder, output_kind, output_lock, recover
from embedkit.storage import read_json, write_json

MODEL_KIND = "model"  # embedkit train's output
ENCODER_KIND = "encoder"  # embedkit pretrain's output
RECORDS = {MODEL_KIND: "embedkit_training.json", ENCODER_KIND: "embedkit_pretraining.json"}  # what each run records
PARTIAL_SUFFIX = ".partial"
RUN_FILE = "run.json"
# Settings that change how a run is carried out or reported, never the model it makes.
NOT_RESULT_SETTINGS = ("output", "resume", "overwrite", "save_steps", "save_total_limit", "logging_steps")


def result_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The settings that decide the trained weights (what a rerun must match to resume or to count as done)."""
    return {key: value for key, value in config.items() if key not in NOT_RESULT_SETTINGS}


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return sorted(key for key in {*a, *b} if a.get(key) != b.get(key))


def partial_folder(output: str | Path) -> Path:
    output = Path(output).absolute()
    return output.parent / f"{output.name}{PARTIAL_SUFFIX}"


@dataclass
class TrainingRun:
    """A run about to train: its folders, the checkpoint it resumes from, and what changed since it started."""

    output: Path
    kind: str
    record_name: str
    settings: dict[str, Any]
    resume_from: str | None = None
    changed_on_resume: list[str] = field(default_factory=list)
    fresh: bool = False  # this process made ``partial`` (not a resumed run's): it may remove it on failure

    @property
    def partial(self) -> Path:
        return partial_folder(self.output)

    @property
    def checkpoints(self) -> Path:
        return self.partial / "checkpoints"

    @property
    def staging(self) -> Path:
        """Where the finished model is saved before it takes ``output``'s place."""
        return self.partial / "model"

    def fresh_staging(self) -> Path:
        if self.staging.exists():
            shutil.rmtree(self.staging)
        self.staging.mkdir(parents=True)
        return self.staging

    def commit(self) -> Path:
        """Swap the staged model into ``output`` in one step and delete the partial folder."""
        with output_lock(self.output):
            recover(self.output)
            check_output_folder(self.output, self.kind, overwrite=True)  # decided when the run started
            commit_folder(self.staging, self.output)
            shutil.rmtree(self.partial, ignore_errors=True)
        return self.output


def _finished(output: Path, kind: str, record_name: str) -> dict[str, Any] | None:
    """The recorded settings of the model in ``output``, if it is one of ``kind``."""
    if not output.is_dir() or output_kind(output) != kind:
        return None
    record = read_json(output / record_name)
    return record.get("config") if isinstance(record, dict) else None


def _started_with(partial: Path) -> dict[str, Any] | None:
    """The settings an unfinished run in ``partial`` started with (None if there is none)."""
    if not (partial / RUN_FILE).is_file():
        return None
    started = read_json(partial / RUN_FILE)
    return started.get("settings", {}) if isinstance(started, dict) else {}


def checkpoint_step(checkpoint: Path) -> int:
    return int(checkpoint.name.rsplit("-", 1)[-1])


def checkpoint_folders(folder: Path, complete: bool = True) -> list[Path]:
    """The Trainer's checkpoints in ``folder``, oldest first; ``complete``: only those with ``trainer_state.json``
    (the Trainer writes it last, so a kill mid-save leaves a checkpoint without it)."""
    numbered = [p for p in folder.glob("checkpoint-*") if p.name.rsplit("-", 1)[-1].isdigit()]
    checkpoints = sorted(numbered, key=checkpoint_step)
    return [p for p in checkpoints if (p / "trainer_state.json").is_file()] if complete else checkpoints


def _latest_checkpoint(folder: Path, main: bool) -> str | None:
    """The last complete checkpoint; the main process deletes incomplete ones."""
    checkpoints, complete = checkpoint_folders(folder, complete=False), checkpoint_folders(folder)
    if main:
        for incomplete in set(checkpoints) - set(complete):
            shutil.rmtree(incomplete, ignore_errors=True)
    return str(complete[-1]) if complete else None


def check_run(
    output: str | Path, kind: str, config: dict[str, Any], *, resume: bool | None = None, overwrite: bool = False
) -> bool:
    """What a run into ``output`` would refuse, told without changing anything (so the CLI refuses before torch
    loads); True when ``output`` already holds the model these settings make (nothing to train)."""
    output = Path(output).absolute()
    settings = result_settings(config)
    done = _finished(output, kind, RECORDS[kind])
    done = None if done is None else result_settings(done)
    if done is not None and not overwrite:
        if done == settings:
            return True
        article, differs = "an" if kind[0] in "aeiou" else "a", ", ".join(_differences(done, settings))
        raise EmbedkitError(
            f"holds {article} {kind} trained with other settings (differs in: {differs}); "
            "pass --overwrite to replace it, or choose another --output",
            path=output,
            field="--output",
        )
    check_output_folder(output, kind, overwrite=True)  # only embedkit's own kind is ever replaced
    started = _started_with(partial_folder(output))
    if started is not None and not overwrite and resume is None and (differs := _differences(started, settings)):
        raise EmbedkitError(
            f"holds an unfinished run with other settings (differs in: {', '.join(differs)}); pass --resume to "
            "continue it with these settings, --overwrite to start again, or choose another --output",
            path=partial_folder(output),
            field="--output",
        )
    return False


def prepare_run(
    output: str | Path,
    kind: str,
    config: dict[str, Any],
    *,
    resume: bool | None = None,
    overwrite: bool = False,
    main: bool = True,
) -> TrainingRun | None:
    """Decide what a run into ``output`` does; None when ``output`` already holds its model (nothing to train).

    Only the ``main`` process changes anything on disk (under torchrun the others call it after the main one, see
    ``TrainingArguments.main_process_first``, and find the state it left).
    """
    output = Path(output).absolute()
    run = TrainingRun(output, kind, RECORDS[kind], result_settings(config))
    if main:
        recover(output)  # what a kill during an earlier commit left beside OUTPUT
    if check_run(output, kind, config, resume=resume, overwrite=overwrite):
        if main and _started_with(run.partial) == run.settings:  # killed after its commit: the rest is litter
            shutil.rmtree(run.partial)
        return None
    started = _started_with(run.partial)
    if started is not None and not overwrite and resume is not False:
        run.resume_from = _latest_checkpoint(run.checkpoints, main)
        run.changed_on_resume = _differences(started, run.settings)
        return run
    if main:
        if run.partial.exists():
            shutil.rmtree(run.partial)
        run.partial.mkdir(parents=True)
        run.fresh = True
        write_json(run.partial / RUN_FILE, {"format": f"embedkit.{kind}-run/1", "settings": run.settings})
    return run


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its ancestors that do not exist yet, innermost first."""
    missing = []
    while not folder.exists() and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    return missing


@contextlib.contextmanager
def locked_run(output: str | Path, main: bool) -> Iterator[list[TrainingRun]]:
    """``run_lock``, and a run refused or failing before its first checkpoint removes what it made
    (``OUTPUT.partial`` while it still holds the lock, then the folders made to hold it), so the corrected command
    starts clean instead of meeting "an unfinished run with other settings". The caller appends its run to the
    yielded list once ``prepare_run`` made it. A run with a checkpoint keeps it (``--resume`` goes on from there),
    and a resumed run's folder was never this run's to remove."""
    missing = _missing_folders(Path(output).absolute().parent)
    runs: list[TrainingRun] = []
    try:
        with run_lock(output, main):
            try:
                yield runs
            except BaseException:
                for run in runs if main else []:
                    if run.fresh and _latest_checkpoint(run.checkpoints, main=False) is None:
                        shutil.rmtree(run.partial, ignore_errors=True)
                raise
    except BaseException:
        for folder in missing if main else []:
            try:
                folder.rmdir()  # only while empty: never anything another writer put there
            except OSError:
                break
        raise


@contextlib.contextmanager
def run_lock(output: str | Path, main: bool) -> Iterator[None]:
    """The main process holds ``output``'s lock for the whole run; a second run into it waits, then finds it done."""
    if not main:
        yield
        return
    with output_lock(Path(output).absolute()):
        yield
