"""What an `xlpe-train` run reuses, checked before it is reused (`xlpe.features.artefacts`):

* **The output directory.** Held locked for the whole run (`.xlpe.lock`, global rank 0 only: every rank locking
  the same directory would deadlock a multi-process run); a second run into it stops at once. A training run
  records what made it (`xlpe_artefact.json`, kind "training-run": every argument's value, and the digests of the
  data, tokenizer, model and config it read). A plain rerun into a
  directory that holds results (checkpoints, a model, train results) is refused unless --overwrite_output_dir.
* **A resume** (`--resume_from_checkpoint`) is one comparison of the run's whole record (every argument) with the
  saved one: the arguments `RESUME_MAY_CHANGE` names (output and reporting, how long, save/evaluation cadence,
  evaluation settings, speed and device) are applied and listed in one line (`resuming: applying changed
  --max_steps 300 -> 600`); any other difference is refused, naming each argument.
* **The checkpoint's files** are checked before the Trainer loads them: trainer_state.json, the weights, the
  optimizer, scheduler and RNG states must be there and whole (a missing one would silently restart the
  schedule or the data order; a truncated one would be a traceback deep in torch).

Everything here raises `UsageError` (one line, exit 2).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import struct
import zipfile
from dataclasses import MISSING, asdict, fields, is_dataclass
from pathlib import Path

from transformers import TrainerCallback

from ..features.artefacts import (
    RECORD_NAME,
    ArtefactMismatch,
    ArtefactRecord,
    DirectoryInUse,
    digest,
    directory_lock,
    file_digest,
    read_record,
    write_record,
)
from .errors import UsageError, key_line

logger = logging.getLogger("xlpe.train")
KIND = "training-run"

RESULTS = (
    "model.safetensors",
    "pytorch_model.bin",
    "model.safetensors.index.json",
    "train_results.json",
    "trainer_state.json",
)
LARGE_FILE = 256 << 20  # bytes: bigger files are fingerprinted by size, head and tail (a model's weights)


# ---------------------------------------------------------------------------------------------------------
# The record of a training run
# ---------------------------------------------------------------------------------------------------------


def _json_value(value):
    if isinstance(value, float) and value.is_integer():
        return int(value)  # one spelling of a number: 2 and 2.0 are the same option (HF keeps steps as floats)
    try:
        return json.loads(json.dumps(value, default=str, allow_nan=False))
    except ValueError:  # inf, nan
        return str(value)


def _path_fingerprint(path: Path) -> str:
    """Digest of a local file, or of the regular files directly in a directory (name -> digest; files over
    LARGE_FILE by size and their first and last MiB)."""
    if path.is_file():
        return file_digest(path)
    entries = {}
    for item in sorted(path.iterdir()):
        if not item.is_file() or item.name in ("xlpe_artefact.json", ".xlpe.lock"):
            continue
        size = item.stat().st_size
        if size <= LARGE_FILE:
            entries[item.name] = file_digest(item)
        else:
            with open(item, "rb") as handle:
                head = handle.read(1 << 20)
                handle.seek(size - (1 << 20))
                entries[item.name] = [size, digest(head.hex()), digest(handle.read().hex())]
    for sub in sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith(("checkpoint-", "."))):
        entries[sub.name + "/"] = digest(
            {p.name: file_digest(p) for p in sorted(sub.glob("*.json"))}
        )  # datasets splits
    return digest(entries)


def input_digest(value: str, revision: str | None = None) -> str:
    """What a path option names: the fingerprint of a local file or directory, or a Hub id (with revision)."""
    path = Path(value)
    if path.exists():
        try:
            record = read_record(path) if path.is_dir() else None  # an artefact with a record: it says it all
        except ArtefactMismatch as error:  # a damaged record
            raise UsageError(str(error)) from None
        return digest(record.to_json()) if record is not None else _path_fingerprint(path)
    return digest(f"hub:{value}@{revision or 'main'}")


# The arguments a resume may change, each group with why the resumed run stays the run it was: every other
# argument (inherited transformers ones included) shapes the model, the data, the optimisation or its order, and a
# resume that changes it is refused by name.
RESUME_MAY_CHANGE: dict[str, tuple[str, ...]] = {
    # where the run writes and what it reports: never read by the training loop
    "output and reporting": tuple(
        """output_dir overwrite_output_dir resume_from_checkpoint logging_strategy logging_steps logging_first_step
        logging_nan_inf_filter log_on_each_node log_level log_level_replica disable_tqdm report_to run_name
        project trackio_space_id trackio_bucket_id trackio_static_space_id skip_memory_metrics push_to_hub
        hub_model_id hub_strategy hub_private_repo hub_always_push hub_revision hub_token token dataset_label license
        num_translation_examples""".split()
    ),
    # how long: a resume extends (or shortens) the run; the steps done are what they were
    "length": tuple("""max_steps num_train_epochs""".split()),
    # how often it saves and evaluates: checkpoints and scores, not the updates between them
    "save and evaluation cadence": tuple(
        """save_strategy save_steps save_total_limit save_only_model save_on_each_node eval_strategy eval_steps
        eval_delay eval_on_start eval_accumulation_steps eval_do_concat_batches per_device_eval_batch_size
        early_stopping_patience""".split()
    ),
    # what an evaluation measures and how it decodes: scores of the weights, which it does not change
    "evaluation": tuple(
        """do_eval do_predict eval_subset eval_with_oracle_positions num_beams generation_num_beams
        generation_max_length val_max_target_length max_eval_samples max_predict_samples bleu_tokenize
        average_last_checkpoints""".split()
    ),
    # how fast it runs where it runs: the same updates (the precision follows the device a run continues on; its
    # optimizer state is fp32 either way)
    "speed and device": tuple(
        """bf16 fp16 tf32 torch_compile dataloader_num_workers dataloader_pin_memory dataloader_persistent_workers
        dataloader_prefetch_factor preprocessing_num_workers cache_dir overwrite_cache nltk_data local_rank
        ddp_timeout""".split()
    ),
}
RESUME_CHANGEABLE = frozenset(name for names in RESUME_MAY_CHANGE.values() for name in names)
# the arguments that name an input: recorded as their value and as the digest of what they name (`inputs`); a
# resume must read the same content, by whatever path
INPUT_ARGUMENTS = (
    "model_name_or_path",
    "config_name",
    "tokenizer_name",
    "reorderer",
    "dataset_name",
    "prepared_dataset",
)
SECRETS = ("token", "hub_token")  # recorded as whether they were set, never their value
NOT_ON_CARD = RESUME_MAY_CHANGE["output and reporting"] + RESUME_MAY_CHANGE["speed and device"]
ALL_ARGUMENTS = "every argument"  # the record's "--record" option: it holds every argument (older ones: some)


def is_input(name: str) -> bool:
    return name in INPUT_ARGUMENTS or name.endswith("_file")


def run_record(run) -> ArtefactRecord:
    """The record a training run with the arguments of `run` (a `RunConfig`) writes, and a resume must match: every
    argument of the three groups (`dataclasses.fields`, transformers' inherited ones included), and the digest of
    each input an argument names."""
    inputs, options = {}, {"--record": ALL_ARGUMENTS}
    for group in run.groups():
        for field_ in fields(group):
            if not field_.init:
                continue
            name, value = field_.name, getattr(group, field_.name)
            if name in SECRETS:
                value = value is not None
            elif is_input(name) and value and not str(value).startswith("builtin:"):
                inputs[f"--{name}"] = input_digest(str(value), getattr(run.model, "model_revision", None))
            elif is_dataclass(value):  # a config object (transformers' AcceleratorConfig): its fields
                value = asdict(value)
            elif name == "optim":  # the fused AdamW keeps the same state as the plain one (CUDA defaults choose it)
                value = str(getattr(value, "value", value)).replace("adamw_torch_fused", "adamw_torch")
            options[f"--{name}"] = _json_value(getattr(value, "value", value))
    return ArtefactRecord(KIND, inputs=inputs, options=options)


def inherited_defaults() -> dict:
    """{"--flag": default} of transformers' `Seq2SeqTrainingArguments`, as the record writes values."""
    from transformers import Seq2SeqTrainingArguments

    made = {}
    for field_ in fields(Seq2SeqTrainingArguments):
        if field_.init and field_.default is not MISSING:
            made[f"--{field_.name}"] = _json_value(getattr(field_.default, "value", field_.default))
        elif field_.init and field_.default_factory is not MISSING:
            made[f"--{field_.name}"] = _json_value(field_.default_factory())
    return made


def resume_differences(saved: ArtefactRecord, expected: ArtefactRecord) -> tuple[list, list]:
    """(changeable, refused): the (flag, saved, now) of every argument whose value differs between the saved
    record and this run's, split by `RESUME_CHANGEABLE`; an input's path may change when what it names has not."""
    changeable, refused = [], []
    for flag in sorted(set(saved.options) | set(expected.options)):
        before, after = saved.options.get(flag), expected.options.get(flag)
        name = flag.lstrip("-")
        if before == after or (
            is_input(name) and flag in expected.inputs and saved.inputs.get(flag) == expected.inputs[flag]
        ):
            continue
        (changeable if name in RESUME_CHANGEABLE else refused).append((flag, before, after))
    for flag in sorted(set(saved.inputs) | set(expected.inputs)):
        if saved.inputs.get(flag) != expected.inputs.get(flag) and saved.options.get(flag) == expected.options.get(
            flag
        ):
            refused.append((flag, None, None))  # the same path, other content
    return changeable, refused


# ---------------------------------------------------------------------------------------------------------
# The output directory: locked, not silently reused
# ---------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def locked_output_dir(training_args, command: str = "xlpe-train"):
    """Hold `--output_dir`'s lock for the block (global rank 0 only); another run holding it -> UsageError."""
    if training_args.process_index != 0:
        yield
        return
    try:
        lock = directory_lock(training_args.output_dir, command)
        lock.__enter__()
    except DirectoryInUse as error:
        raise UsageError(f"--output_dir {error}") from None
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def held_results(output_dir: Path) -> list[str]:
    """What a finished or interrupted run left in `output_dir`: checkpoints, a final model, train results."""
    if not output_dir.is_dir():
        return []
    return sorted(
        p.name for p in output_dir.iterdir() if p.name in RESULTS or (p.is_dir() and p.name.startswith("checkpoint-"))
    )


def verify_resume(run, checkpoint: str) -> ArtefactRecord:
    """Check the resumed run's record (in the checkpoint's run directory) against the arguments of `run`: one
    comparison of every argument; those `RESUME_MAY_CHANGE` names are applied (and listed in one line), any other
    difference is a UsageError naming each. A record written by an older xlpe-train, which kept only some
    arguments, is refused: what the others were cannot be checked. Returns the record to keep."""
    training_args = run.training
    expected = run_record(run)
    run_dir = Path(checkpoint).resolve().parent
    what = f"--resume_from_checkpoint {training_args.resume_from_checkpoint}"
    start_over = "or --overwrite_output_dir without --resume_from_checkpoint (or another --output_dir) to start anew"
    try:
        saved = read_record(run_dir)
    except ArtefactMismatch as error:
        raise UsageError(str(error)) from None
    if saved is None or saved.kind != KIND:
        raise UsageError(f"{what}: {run_dir} holds no record of what made it ({RECORD_NAME}); pass {start_over[3:]}")
    if saved.options.get("--record") != ALL_ARGUMENTS:
        raise UsageError(
            f"{what}: {run_dir} was made by an older xlpe-train whose record ({RECORD_NAME}) keeps only some "
            f"arguments, so a resume cannot be checked: resume it with the xlpe version that made it, {start_over}"
        )
    changed, refused = resume_differences(saved, expected)
    if refused:
        listed = "; ".join(
            f"{flag} {_shown(before)} -> {_shown(after)}" if before != after else f"{flag}: other content now"
            for flag, before, after in refused
        )
        raise UsageError(
            f"{what}: a resume continues the same training, and {len(refused)} argument(s) differ from the run's "
            f"({listed}): give the run's own values, {start_over}"
        )
    if changed and training_args.process_index == 0:
        message = "; ".join(f"{flag} {_shown(old)} -> {_shown(new)}" for flag, old, new in changed)
        print(f"xlpe-train: resuming: applying changed {message}", flush=True)
    return expected


def _shown(value) -> str:
    return value if isinstance(value, str) and " " in value else json.dumps(value)


def write_run_record(training_args, record: ArtefactRecord) -> None:
    if training_args.process_index == 0:
        write_record(training_args.output_dir, record)


class ApplyResumedFrequencies(TrainerCallback):
    """The Trainer restores logging/eval/save steps from the checkpoint's trainer_state.json; a resume that
    changes them (listed by `verify_resume`) gets the new ones."""

    def on_train_begin(self, args, state, control, **kwargs):
        for kind in ("logging", "eval", "save"):
            steps = getattr(args, f"{kind}_steps")
            if steps is not None:
                setattr(state, f"{kind}_steps", math.ceil(state.max_steps * steps) if steps < 1 else steps)


# ---------------------------------------------------------------------------------------------------------
# Files read back: whole, or one line naming them
# ---------------------------------------------------------------------------------------------------------


def read_json_file(path: Path, what: str):
    """The JSON in `path`; a damaged one -> UsageError naming the file and line."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise UsageError(f"{what}: {path}:{error.lineno}: not valid JSON ({error.msg})") from None
    except (UnicodeDecodeError, OSError) as error:
        raise UsageError(f"{what}: {path}: cannot be read ({type(error).__name__})") from None


def check_safetensors(path: Path, what: str) -> None:
    """The header parses and the file is as long as its tensors need (a truncated copy fails here)."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > size - 8:
                raise ValueError("header longer than the file")
            header = json.loads(handle.read(length))
        end = max((info["data_offsets"][1] for key, info in header.items() if key != "__metadata__"), default=0)
    except (struct.error, ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError):
        raise UsageError(f"{what}: {path}: not a readable safetensors file (damaged or truncated)") from None
    if 8 + length + end > size:
        raise UsageError(f"{what}: {path}: truncated ({size} bytes, its tensors need {8 + length + end})")


def check_torch_file(path: Path, what: str) -> None:
    """A torch.save file is a zip archive: a truncated one has no central directory."""
    try:
        with zipfile.ZipFile(path) as archive:
            archive.infolist()
    except (zipfile.BadZipFile, OSError, EOFError):
        raise UsageError(f"{what}: {path}: damaged or truncated (not a whole torch.save file)") from None


def check_checkpoint(checkpoint: str, training_args) -> None:
    """Everything a resume restores must be in `checkpoint` and whole: trainer_state.json, config.json, the
    weights, and (unless DeepSpeed/FSDP keep their own layout) optimizer.pt, scheduler.pt and this process' RNG
    state. A missing one would silently restart the schedule or the data order."""
    path = Path(checkpoint)
    what = f"--resume_from_checkpoint {training_args.resume_from_checkpoint}"
    weights_only = (
        f"; start a new run from its weights with --model_name_or_path {path} instead, "
        "or resume from another checkpoint"
    )
    state = read_json_file(path / "trainer_state.json", what)
    if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
        raise UsageError(f"{what}: {path / 'trainer_state.json'}: not a trainer state (no integer global_step)")
    if (path / "config.json").is_file():
        check_config_file(path, what)
    sharded = bool(training_args.deepspeed or training_args.fsdp)
    if not sharded:
        if (path / "model.safetensors").is_file():
            check_safetensors(path / "model.safetensors", what)
        elif not any((path / name).is_file() for name in ("pytorch_model.bin", "model.safetensors.index.json")):
            raise UsageError(f"{what}: {path} lacks model.safetensors (the weights): not a checkpoint to resume")
    rng = f"rng_state_{training_args.process_index}.pth" if training_args.world_size > 1 else "rng_state.pth"
    needed = (
        [] if sharded else [("optimizer.pt", "the optimizer state"), ("scheduler.pt", "the learning-rate schedule")]
    )
    for name, meaning in [
        *needed,
        (rng, f"the random state of process {training_args.process_index} of {training_args.world_size}"),
    ]:
        if not (path / name).is_file():
            raise UsageError(
                f"{what}: {path} lacks {name} ({meaning}), "
                f"so the run cannot continue exactly where it stopped{weights_only}"
            )
        check_torch_file(path / name, what)


POSITIVE_INTEGERS = (
    "vocab_size",
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "max_position_embeddings",
)
PROBABILITIES = ("dropout", "attention_dropout", "activation_dropout")


def check_config_file(directory, what: str) -> None:
    """A model directory's config.json: valid JSON (file:line), an object, sizes positive integers, dropouts in
    [0, 1] (a hand-edited value would otherwise fail deep inside the model's construction)."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        return
    config = read_json_file(path, what)
    if not isinstance(config, dict):
        raise UsageError(f"{what}: {path}: a config must be a JSON object, got {type(config).__name__}")
    text = path.read_text(encoding="utf-8")
    for name in (*POSITIVE_INTEGERS, *PROBABILITIES):
        if name not in config:
            continue
        value = config[name]
        integer = name in POSITIVE_INTEGERS
        if integer:
            bad = isinstance(value, bool) or not isinstance(value, int) or value < 1
        else:
            bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1
        if bad:
            line = key_line(text, name)
            raise UsageError(
                f"{what}: {path}:{line}: {name} must be "
                f"{'a positive integer' if integer else 'a number in [0, 1]'}, got {json.dumps(value)}"
            )


def check_prepared_dataset(path) -> None:
    """An xlpe-prepare output directory, whole: its JSON files parse (file:line), every split it lists has its
    state.json and the Arrow files that names, and each Arrow file reads to its end (a truncated one fails)."""
    path = Path(path)
    what = f"--prepared_dataset {path}"
    if not path.is_dir():
        return
    for name in ("report.json", "dataset_dict.json"):
        if (path / name).is_file():
            read_json_file(path / name, what)
    if (path / "dataset_dict.json").is_file():
        splits = read_json_file(path / "dataset_dict.json", what)
        names = splits.get("splits") if isinstance(splits, dict) else None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise UsageError(f'{what}: {path / "dataset_dict.json"}: needs "splits", a list of split names')
        folders = [path / name for name in names]
    elif (path / "state.json").is_file():
        folders = [path]
    else:
        return  # not a datasets directory at all: use_prepared_dataset says so
    import pyarrow as pa

    for folder in folders:
        state_file = folder / "state.json"
        if not state_file.is_file():
            raise UsageError(f"{what}: split {folder.name} lacks {state_file} (damaged: prepare it again)")
        state = read_json_file(state_file, what)
        files = state.get("_data_files") if isinstance(state, dict) else None
        if not isinstance(files, list) or not all(
            isinstance(f, dict) and isinstance(f.get("filename"), str) for f in files
        ):
            raise UsageError(f'{what}: {state_file}: needs "_data_files", a list of {{"filename": ...}}')
        for entry in files:
            arrow = folder / entry["filename"]
            if not arrow.is_file():
                raise UsageError(f"{what}: {arrow} is missing (named by {state_file}): prepare it again")
            try:
                with pa.memory_map(str(arrow)) as source:
                    reader = pa.ipc.open_stream(source)
                    for _ in reader:
                        pass
            except (pa.ArrowException, OSError, ValueError):
                raise UsageError(f"{what}: {arrow}: damaged or truncated Arrow file: prepare it again") from None


__all__ = [
    "ApplyResumedFrequencies",
    "RESUME_MAY_CHANGE",
    "resume_differences",
    "check_checkpoint",
    "check_config_file",
    "check_prepared_dataset",
    "held_results",
    "locked_output_dir",
    "read_json_file",
    "run_record",
    "verify_resume",
    "write_run_record",
]
