"""`xlpe-compare`: does a variant beat a plain Marian trained the same way on the user's data?

One folder (`--output_dir OUT`) holds the whole comparison, each part made by the package's own commands through
their public command lines (argv), so every part is what a user would get by hand:

* `OUT/prepared`: the data, prepared once by `xlpe-prepare` (or the user's `--prepared_dataset`): the same splits,
  features and sub-word tokenizer for every run;
* `OUT/reorderer`: one test-time reorderer, trained by `xlpe-reorder train --prepared` on that data, attached to
  every XL PE variant (`xlpe-train --reorderer`) unless the variant names its own (`--reorderer builtin`: the
  built-in predictor);
* `OUT/probes/VARIANT`: a few timed steps of each variant (`--probe_steps`), from which the plan's time estimate is
  made (`xlpe.training.plan.estimate_run`, the arithmetic `xlpe-train`'s own estimate uses);
* `OUT/runs/VARIANT-seedK`: one `xlpe-train` run per variant and seed (seeds 1..N), the same flags but the
  variant's; it scores dev and test and writes the test translations (with oracle positions too for XL PE);
* `OUT/dev/VARIANT-seedK.txt`: each run's dev translations, `xlpe-translate` of the prepared validation split's
  sources (`OUT/dev.source`) with the model as saved (a finished run lacking them gets only this step);
* `OUT/compare.json`: the request (data digests, variants, seeds, flags). A rerun of the same command reuses the
  finished runs (each checked against its own run record), resumes the interrupted ones (`--resume_from_checkpoint
  last`) or restarts those that saved nothing; a request that differs is refused naming what differs (new
  variants and more seeds are added);
* `OUT/report.md`, `report.json`, `report.png` (`xlpe.training.compare_report`): BLEU/chrF with sacrebleu
  signatures, the paired bootstrap per seed against the first variant and the project's seed rule
  (`xlpe.evaluation.verdict`), oracle positions as a diagnostic of XL PE variants.

Runs go `jobs` at a time (subprocesses, each given its share of the CPU threads, or one GPU each through
`CUDA_VISIBLE_DEVICES`); the command line (`xlpe/cli/compare.py`) runs them in-process when `jobs` is 1.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..features.artefacts import file_digest
from ..features.text_files import write_text_atomic
from .compare_report import DEV_FOLDER, build_report, dev_translations, duration, write_report
from .errors import UsageError

RECORD_FILE = "compare.json"
RECORD_KIND = "xlpe-compare"
RECORD_FORMAT = 1
DEFAULT_SEEDS = 3
DEFAULT_PROBE_STEPS = 10
PROBE_SENTENCES = 8  # validation and test sentences the probe decodes (an untrained model: an upper bound)
THREADS_PER_RUN = 4  # CPU threads one run gets when several run at once
BUILTIN = "builtin"  # `--reorderer builtin`: an XL PE variant keeps its built-in position predictor
DATA_FLAGS = ("source", "target", "validation_source", "validation_target", "test_source", "test_target")
# xlpe-train flags the comparison sets itself: a variant or --train_args naming one is refused
OWNED_FLAGS = (
    "--output_dir",
    "--seed",
    "--prepared_dataset",
    "--overwrite_output_dir",
    "--resume_from_checkpoint",
    "--train_source_file",
    "--train_target_file",
    "--train_file",
    "--dataset_name",
    "--tokenizer_name",
)
MODULES = {
    "xlpe-prepare": "xlpe.cli.prepare",
    "xlpe-train": "xlpe.cli.train",
    "xlpe-reorder": "xlpe.cli.reorder",
    "xlpe-translate": "xlpe.cli.translate",
}
DEV_SOURCE = "dev.source"  # OUT/dev.source: the prepared validation split's sources, one a line
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")

# runner(program, argv, log file, environment additions) -> exit status
Runner = Callable[[str, Sequence[str], Path, dict], int]


class CompareError(UsageError):
    """A request `xlpe-compare` cannot carry out as given: one line, exit status 2."""


class RunFailed(RuntimeError):
    """A command of the comparison failed (its own message is above, or in its log): one line, exit status 1; the
    same command resumes."""


def _where(log: Path) -> str:
    return f"; log {log}" if log.is_file() else " (its message is above)"


# ---------------------------------------------------------------------------------------------------------
# Variants: "NAME: xlpe-train flags"
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    name: str
    flags: tuple[str, ...]

    @property
    def is_xlpe(self) -> bool:
        return flag_value(self.flags, "--model_type") == "xlpe"

    def spec(self) -> str:
        return f"{self.name}: {shlex.join(self.flags)}"


DEFAULT_VARIANTS = (
    "vanilla: --model_type vanilla",
    "xlpe-combination: --model_type xlpe --xl_strategy combination",
)


def flag_value(flags: Sequence[str], flag: str) -> str | None:
    """The value of the last `flag VALUE` / `flag=VALUE` in `flags`, or None."""
    value = None
    for index, item in enumerate(flags):
        if item == flag and index + 1 < len(flags):
            value = flags[index + 1]
        elif item.startswith(flag + "="):
            value = item.split("=", 1)[1]
    return value


def split_flags(text: str, what: str) -> tuple[str, ...]:
    """`text` split as a shell would (shlex); every flag spelled with underscores (`--max-steps` is `--max_steps`)."""
    try:
        items = shlex.split(text)
    except ValueError as error:
        raise CompareError(f"{what} {text!r}: {error}") from None
    if items and not items[0].startswith("--"):
        raise CompareError(f"{what} {text!r}: expected xlpe-train flags (--flag value ...), got {items[0]!r} first")
    spelled = tuple("--" + item[2:].replace("-", "_") if item.startswith("--") else item for item in items)
    for flag in spelled:
        if flag.split("=", 1)[0] in OWNED_FLAGS:
            raise CompareError(f"{what} {text!r}: {flag.split('=', 1)[0]} is set by xlpe-compare for every run")
    return spelled


def split_args(text: str, what: str) -> tuple[str, ...]:
    """Another command's flags (`--prepare_args`, `--reorder_args`), split as a shell would."""
    try:
        return tuple(shlex.split(text))
    except ValueError as error:
        raise CompareError(f"{what} {text!r}: {error}") from None


def parse_variant(text: str) -> Variant:
    """`"NAME: FLAGS"` -> Variant. NAME: letters, digits and `._+-` (it names the run folders); FLAGS: xlpe-train
    flags, e.g. `"xlpe-in: --model_type xlpe --xl_strategy in"`. ValueError (CompareError) naming `--variant`."""
    name, colon, flags = text.partition(":")
    name = name.strip()
    if not colon or not NAME.fullmatch(name):
        raise CompareError(
            f"--variant {text!r}: expected 'NAME: xlpe-train flags' with NAME of letters, digits and ._+- "
            "(e.g. 'xlpe-in: --model_type xlpe --xl_strategy in')"
        )
    parsed = split_flags(flags, f"--variant {name}:")
    if not parsed:
        raise CompareError(f"--variant {text!r}: no flags (at least --model_type)")
    return Variant(name, parsed)


def parse_variants(texts: Sequence[str] | None) -> list[Variant]:
    variants = [parse_variant(text) for text in (texts or DEFAULT_VARIANTS)]
    names = [variant.name for variant in variants]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise CompareError(f"--variant: the name {twice[0]!r} is given twice; each variant needs its own name")
    if len(variants) < 2:
        raise CompareError(f"--variant: a comparison needs at least two variants, got {len(variants)}")
    return variants


# ---------------------------------------------------------------------------------------------------------
# The request and its record
# ---------------------------------------------------------------------------------------------------------


@dataclass
class CompareRequest:
    output_dir: Path
    variants: list[Variant]
    seeds: int = DEFAULT_SEEDS
    data: dict = field(default_factory=dict)  # {"source": path, ...} (raw files for xlpe-prepare)
    prepared_dataset: Path | None = None
    source_lang: str | None = None
    target_lang: str | None = None
    train_args: tuple[str, ...] = ()
    prepare_args: tuple[str, ...] = ()
    reorder_args: tuple[str, ...] = ()
    jobs: int | None = None
    probe_steps: int = DEFAULT_PROBE_STEPS

    def __post_init__(self):
        self.output_dir = Path(self.output_dir)
        self.prepared_dataset = None if self.prepared_dataset is None else Path(self.prepared_dataset)
        if self.seeds < 1:
            raise CompareError(f"--seeds {self.seeds}: expected at least 1")
        if self.probe_steps < 0:
            raise CompareError(f"--probe_steps {self.probe_steps}: expected 0 (no time probe) or more")
        if self.jobs is not None and self.jobs < 1:
            raise CompareError(f"--jobs {self.jobs}: expected at least 1")
        if (self.prepared_dataset is None) == (not self.data):
            raise CompareError("give the raw files (--source, --target, --test_source, ...) or --prepared_dataset")
        if self.data:
            missing = [
                f"--{name}" for name in ("source", "target", "test_source", "test_target") if name not in self.data
            ]
            missing += [f"--{name}" for name in ("source_lang", "target_lang") if not getattr(self, name)]
            if missing:
                raise CompareError(f"raw files need {', '.join(missing)} too (or give --prepared_dataset)")
            if ("validation_source" in self.data) != ("validation_target" in self.data):
                raise CompareError("--validation_source and --validation_target go together")

    @property
    def prepared(self) -> Path:
        return self.prepared_dataset if self.prepared_dataset is not None else self.output_dir / "prepared"

    @property
    def reorderer(self) -> Path:
        return self.output_dir / "reorderer"

    def needs_reorderer(self) -> bool:
        return any(v.is_xlpe and flag_value(v.flags, "--reorderer") is None for v in self.variants)

    def run_dir(self, variant: Variant, seed: int) -> Path:
        return self.output_dir / "runs" / f"{variant.name}-seed{seed}"

    def runs(self) -> list[tuple[Variant, int]]:
        """Every (variant, seed), seed by seed: the first seed of every variant comes first."""
        return [(variant, seed) for seed in range(1, self.seeds + 1) for variant in self.variants]


def prepared_digest(folder: Path) -> str:
    """SHA-256 over a prepared dataset's split states (`datasets`' fingerprints) and its report."""
    digest = hashlib.sha256()
    for path in sorted([*folder.glob("*/state.json"), folder / "dataset_dict.json", folder / "report.json"]):
        if path.is_file():
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def request_record(request: CompareRequest) -> dict:
    """What `OUT/compare.json` holds: everything that shapes the runs (not --jobs or --probe_steps)."""
    if request.data:
        data = {f"--{name}": file_digest(Path(path)) for name, path in sorted(request.data.items())}
        data |= {"--source_lang": request.source_lang, "--target_lang": request.target_lang}
    else:
        data = {"--prepared_dataset": prepared_digest(request.prepared)}
    return {
        "kind": RECORD_KIND,
        "format": RECORD_FORMAT,
        "data": data,
        "variants": {variant.name: list(variant.flags) for variant in request.variants},
        "seeds": request.seeds,
        "--train_args": list(request.train_args),
        "--prepare_args": list(request.prepare_args),
        "--reorder_args": list(request.reorder_args),
    }


def flag_difference(old: Sequence[str], new: Sequence[str]) -> str:
    """The first flag whose value differs between two flag lists: "--learning_rate (not given) -> 1e-3"."""
    flags = dict.fromkeys(item.split("=", 1)[0] for item in [*old, *new] if item.startswith("--"))
    for flag in flags:
        before, after = flag_value(old, flag), flag_value(new, flag)
        present = (
            flag in old or any(i.startswith(flag + "=") for i in old),
            flag in new or any(i.startswith(flag + "=") for i in new),
        )
        if before != after or present[0] != present[1]:
            shown = [
                ("(not given)" if not there else repr(value or "")) for there, value in zip(present, (before, after))
            ]
            return f"{flag} {shown[0]} -> {shown[1]}"
    return f"{shlex.join(old)!r} -> {shlex.join(new)!r}"


def check_record(old: dict, new: dict, folder: Path) -> list[str]:
    """Refuse (CompareError naming it) what differs between the folder's record `old` and the request `new`;
    returns what is added (new variants, more seeds), which a rerun may do."""
    again = "choose another --output_dir for a different comparison"
    if old.get("kind") != RECORD_KIND or old.get("format") != RECORD_FORMAT:
        raise CompareError(
            f"--output_dir {folder}: {RECORD_FILE} is not an xlpe-compare record of format {RECORD_FORMAT}"
        )
    for key in ("data", "--train_args", "--prepare_args", "--reorder_args"):
        if key == "data":
            for flag in sorted(set(old["data"]) | set(new["data"])):
                if old["data"].get(flag) != new["data"].get(flag):
                    raise CompareError(
                        f"--output_dir {folder} compares other data: {flag} differs from its first run "
                        f"({old['data'].get(flag)} -> {new['data'].get(flag)}); {again}"
                    )
        elif old.get(key) != new[key]:
            difference = flag_difference(old.get(key) or [], new[key])
            raise CompareError(
                f"--output_dir {folder}: {key} differs from its first run ({difference}); every run must be "
                f"trained the same way: {again}"
            )
    added = []
    for name, flags in new["variants"].items():
        if name not in old["variants"]:
            added.append(f"variant {name}")
        elif old["variants"][name] != flags:
            raise CompareError(
                f"--variant {name}: was {shlex.join(old['variants'][name])!r} in {folder}, now {shlex.join(flags)!r}; "
                f"give the changed variant another name, or {again}"
            )
    if new["seeds"] > old["seeds"]:
        added.append(f"seeds {old['seeds'] + 1}-{new['seeds']}")
    return added


def load_record(folder: Path) -> dict | None:
    path = folder / RECORD_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CompareError(f"{path}: not valid JSON ({error}); remove it to start the comparison over") from None


# ---------------------------------------------------------------------------------------------------------
# The commands, as argv
# ---------------------------------------------------------------------------------------------------------


def prepare_argv(request: CompareRequest) -> list[str]:
    argv = [item for name in DATA_FLAGS if name in request.data for item in (f"--{name}", str(request.data[name]))]
    argv += ["--source_lang", request.source_lang, "--target_lang", request.target_lang]
    return argv + ["--output", str(request.prepared), *request.prepare_args]


def reorder_argv(request: CompareRequest) -> list[str]:
    tokenizer = request.prepared / "tokenizer"
    return ["train", "--prepared", str(request.prepared), "--tokenizer", str(tokenizer)] + [
        "--output_dir",
        str(request.reorderer),
        *request.reorder_args,
    ]


def variant_flags(request: CompareRequest, variant: Variant) -> list[str]:
    """The variant's flags with the comparison's reorderer attached to an XL PE variant (or none: `builtin`)."""
    flags = list(variant.flags)
    given = flag_value(flags, "--reorderer")
    if given == BUILTIN:
        flags = [item for i, item in enumerate(flags) if item != "--reorderer" and flags[i - 1 : i] != ["--reorderer"]]
        flags = [item for item in flags if not item.startswith("--reorderer=")]
    elif given is None and variant.is_xlpe:
        flags += ["--reorderer", str(request.reorderer)]
    return flags


def train_argv(request: CompareRequest, variant: Variant, seed: int) -> list[str]:
    """xlpe-train's argv for one run (without the resume flags `plan_runs` adds)."""
    return [
        "--prepared_dataset",
        str(request.prepared),
        "--output_dir",
        str(request.run_dir(variant, seed)),
        "--seed",
        str(seed),
        *request.train_args,
        *variant_flags(request, variant),
    ]


def probe_argv(request: CompareRequest, variant: Variant) -> list[str]:
    """A few timed steps of `variant` (seed 1, its flags, the built-in predictor), scoring a few sentences."""
    argv = train_argv(request, variant, 1)
    argv[argv.index("--output_dir") + 1] = str(request.output_dir / "probes" / variant.name)
    argv = [item for i, item in enumerate(argv) if item != "--reorderer" and argv[i - 1 : i] != ["--reorderer"]]
    return argv + [
        "--overwrite_output_dir",
        "--max_steps",
        str(request.probe_steps),
        "--max_eval_samples",
        str(PROBE_SENTENCES),
        "--max_predict_samples",
        str(PROBE_SENTENCES),
        "--save_strategy",
        "no",
        "--average_last_checkpoints",
        "0",
    ]


def check_variant_flags(request: CompareRequest) -> None:
    """Each variant's flags (with `--train_args`) parsed by xlpe-train's own parser (`run_config.read_given`,
    `build_run_config`) and its `--model_type` looked up (`model_setup.family_classes`), before anything is
    prepared or run: CompareError naming the variant for an unknown flag, a value that does not convert, a recipe
    that does not exist or flags that contradict each other. The comparison's own flags (data, output, seed, the
    attached reorderer) are left out: they are checked where they are made."""
    from .model_setup import family_classes
    from .run_config import build_run_config, read_given, typed_given

    for variant in request.variants:
        flags = [*request.train_args, *variant_flags(request, variant)]
        if flag_value(variant.flags, "--reorderer") is None and variant.is_xlpe:
            flags = flags[:-2]  # the comparison's reorderer (made later)
        try:
            config = build_run_config(typed_given(read_given(flags)))
            if config.model.model_type is not None:
                family_classes(config.model.model_type)
        except (UsageError, ValueError) as error:
            raise CompareError(f"--variant {variant.name}: {error}") from None


def write_dev_source(request: CompareRequest) -> Path | None:
    """OUT/dev.source: the sources of the prepared validation split (`source_text`), one a line; None when the
    prepared dataset has no validation split with its text (then the report has no dev translations)."""
    import datasets

    dataset = datasets.load_from_disk(str(request.prepared))
    if "validation" not in dataset or "source_text" not in dataset["validation"].column_names:
        return None
    path = request.output_dir / DEV_SOURCE
    write_text_atomic(path, "".join(f"{line}\n" for line in dataset["validation"]["source_text"]))
    return path


def translate_argv(request: CompareRequest, variant: Variant, seed: int) -> list[str]:
    """xlpe-translate's argv for one run's dev translations (the model's generation config: the run's beams)."""
    model, output = request.run_dir(variant, seed), dev_translations(request, variant, seed)
    return ["--model", str(model), "--input", str(request.output_dir / DEV_SOURCE), "--output", str(output)] + [
        "--overwrite_output",
        "--quiet",
    ]


# ---------------------------------------------------------------------------------------------------------
# Run folders: finished (checked against their records), resumed, restarted
# ---------------------------------------------------------------------------------------------------------

FINISHED_FILES = ("test_scores.json", "generated_predictions.txt", "all_results.json", "xlpe_artefact.json")


def _same_value(given: str, recorded) -> bool:
    if isinstance(recorded, bool):
        return given.lower() in (("true", "1") if recorded else ("false", "0"))
    if isinstance(recorded, list):  # `--report_to none` is recorded as [] (transformers' own reading)
        return [str(item) for item in recorded] == ([] if given == "none" else given.replace(",", " ").split())
    if isinstance(recorded, (int, float)):
        try:
            return float(given) == float(recorded)
        except ValueError:
            return False
    return recorded is None or str(recorded) == given


def check_finished_run(folder: Path, argv: Sequence[str]) -> None:
    """A finished run is reused only when its run record (`xlpe_artefact.json`) holds the values `argv` gives
    for the options it records; CompareError naming the first that differs."""
    try:
        record = json.loads((folder / "xlpe_artefact.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CompareError(f"{folder}: its run record xlpe_artefact.json cannot be read ({error})") from None
    if record.get("kind") != "training-run":
        raise CompareError(f"{folder}: holds a {record.get('kind')!r}, not an xlpe-train run")
    options = record.get("options", {})
    for index, flag in enumerate(argv):
        if not flag.startswith("--") or flag not in options or index + 1 >= len(argv):
            continue
        value = flag_value(argv, flag)
        if value is not None and not _same_value(value, options[flag]):
            raise CompareError(
                f"{folder}: a finished run with {flag} {options[flag]!r}, but this comparison trains it with "
                f"{value!r}; remove the folder to train it again, or choose another --output_dir"
            )


def run_state(folder: Path) -> str:
    """ "finished", "resume" (a checkpoint to resume from), "restart" (a folder without one) or "new"."""
    if all((folder / name).is_file() for name in FINISHED_FILES):
        return "finished"
    if not folder.exists():
        return "new"
    return "resume" if any(folder.glob("checkpoint-*/trainer_state.json")) else "restart"


def resume_flags(state: str) -> list[str]:
    return {"resume": ["--resume_from_checkpoint", "last"], "restart": ["--overwrite_output_dir"]}.get(state, [])


# ---------------------------------------------------------------------------------------------------------
# Running: in parallel, in subprocesses (or the caller's in-process runner)
# ---------------------------------------------------------------------------------------------------------


def accelerators() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:  # pragma: no cover
        return 0


def default_jobs(gpus: int, cpus: int | None = None) -> int:
    """One run per GPU; on CPU one run per THREADS_PER_RUN cores (at least 1)."""
    if gpus:
        return gpus
    return max(1, (cpus or os.cpu_count() or 1) // THREADS_PER_RUN)


def job_environment(slot: int, jobs: int, gpus: int, cpus: int | None = None) -> dict:
    """What run slot `slot` of `jobs` adds to its environment: its GPU, or its share of the CPU threads."""
    if jobs <= 1:
        return {}
    if gpus:
        return {"CUDA_VISIBLE_DEVICES": str(slot % gpus)}
    threads = str(max(1, (cpus or os.cpu_count() or 1) // jobs))
    return {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}


def subprocess_runner(program: str, argv: Sequence[str], log: Path, env: dict) -> int:
    """Runs `program` (an xlpe console script) as `python -m MODULE argv`, its output into `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as handle:
        command = [sys.executable, "-m", MODULES[program], *argv]
        return subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env={**os.environ, **env}).returncode


def run_all(tasks: list[tuple[str, str, list[str], Path]], runner: Runner, jobs: int, gpus: int, echo) -> list[str]:
    """Runs (label, program, argv, log) tasks `jobs` at a time; returns the labels of those that failed."""
    slots = list(range(max(jobs, 1)))
    failed = []

    def one(task):
        label, program, argv, log = task
        slot = slots.pop(0)
        try:
            echo(f"xlpe-compare: {label}: started" + (f" (log {log})" if runner is subprocess_runner else ""))
            status = runner(program, argv, log, job_environment(slot, jobs, gpus))
        finally:
            slots.append(slot)
        echo(f"xlpe-compare: {label}: {'done' if status == 0 else f'failed with status {status}{_where(log)}'}")
        if status != 0:
            failed.append(label)

    with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        list(pool.map(one, tasks))
    return failed


def step(label: str, program: str, argv: list[str], log: Path, runner: Runner, echo) -> None:
    echo(f"xlpe-compare: {label}: {program} {shlex.join(argv)}")
    status = runner(program, argv, log, {})
    if status != 0:
        raise RunFailed(f"{label} failed ({program} exited with status {status}{_where(log)})")


# ---------------------------------------------------------------------------------------------------------
# The plan and its estimate
# ---------------------------------------------------------------------------------------------------------


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None


def probe_estimate(request: CompareRequest, variant: Variant, sizes: dict) -> dict | None:
    """{part: seconds} of one full run of `variant`, from its probe's timings and run record (None without a
    finished probe): `estimate_run` over the run's shape (steps from --max_steps or the recipe's epochs times the
    probe's batches an epoch; its periodic evaluations, final evaluation and test)."""
    from .plan import RunShape, beam_factor, estimate_run, periodic_evaluations

    folder = request.output_dir / "probes" / variant.name
    train, predict = read_json(folder / "train_results.json"), read_json(folder / "predict_results.json")
    record = read_json(folder / "xlpe_artefact.json")
    if not (train and predict and record) or not train.get("train_seconds_training"):
        return None
    options = record.get("options", {})
    steps_run = max(request.probe_steps, 1)
    given = flag_value([*request.train_args, *variant.flags], "--max_steps")
    if given is not None and int(given) > 0:
        steps = int(given)
    else:
        per_epoch = train.get("train_token_batches_per_epoch") or math.ceil(
            sizes["train"] / max(int(options.get("--per_device_train_batch_size") or 8), 1)
        )
        accumulation = max(int(options.get("--gradient_accumulation_steps") or 1), 1)
        steps = math.ceil(float(options.get("--num_train_epochs") or 1) * per_epoch / accumulation)
    beams = int(options.get("--num_beams") or 1)
    sentence = predict["predict_runtime"] / max(predict.get("predict_samples", PROBE_SENTENCES), 1) / beam_factor(beams)
    evaluating = options.get("--eval_strategy") == "steps" and sizes["validation"] > 0
    shape = RunShape(
        steps=steps,
        evaluations=periodic_evaluations(0, steps, options.get("--eval_steps"), evaluating),
        eval_sentences=min(sizes["validation"], int(options.get("--eval_subset") or sizes["validation"])),
        eval_beams=int(options.get("--generation_num_beams") or 1),
        final_sentences=sizes["validation"],
        test_sentences=sizes["test"],
        final_beams=beams,
        test_passes=2 if (folder / "generated_predictions_oracle.txt").is_file() else 1,
    )
    return estimate_run(shape, train["train_seconds_training"] / steps_run, None, sentence) | {"steps": steps}


def plan_text(request: CompareRequest, states: dict, jobs: int, estimates: dict | None) -> str:
    """The plan in a few lines: the data step, the reorderer, every run and its state, and the time estimate."""
    lines = [
        f"xlpe-compare: plan: {len(request.variants)} variants x {request.seeds} seed(s) = "
        f"{len(states)} xlpe-train runs into {request.output_dir}/runs, {jobs} at a time; "
        f"baseline {request.variants[0].name!r} (paired bootstrap per seed against it, the seed rule)",
        "  data: "
        + (
            f"--prepared_dataset {request.prepared}"
            if request.prepared_dataset
            else f"xlpe-prepare into {request.prepared}"
        ),
    ]
    if request.needs_reorderer():
        lines.append(f"  reorderer: xlpe-reorder train into {request.reorderer} (its own plan and estimate), attached")
    for variant in request.variants:
        lines.append(f"  variant {variant.name}: {shlex.join(variant_flags(request, variant))}")
    lines.append(f"  dev: xlpe-translate of the validation split by every run into {request.output_dir / DEV_FOLDER}")
    counts = {
        state: sum(1 for s in states.values() if s == state) for state in ("finished", "resume", "restart", "new")
    }
    lines.append("  runs: " + ", ".join(f"{count} {state}" for state, count in counts.items() if count))
    lines.append("  " + estimate_text(request, states, jobs, estimates))
    return "\n".join(lines)


def estimate_text(request: CompareRequest, states: dict, jobs: int, estimates: dict | None) -> str:
    """The plan's time line: the runs left, from the probes' estimates per run of each variant."""
    todo = [name for name, state in states.items() if state != "finished"]
    if not todo:
        return "time: nothing to train (every run is finished; the report is made again)"
    if not request.probe_steps:
        return "time: not estimated (--probe_steps 0)"
    if not estimates or not all(estimates.values()):
        return f"time: estimated before the runs start, from {request.probe_steps} timed steps of each variant"
    seconds = sum(estimates[name.rsplit("-seed", 1)[0]]["total"] for name in todo)
    parts = ", ".join(
        f"{name} {duration(value['total'])} ({value['steps']:,} steps)" for name, value in estimates.items()
    )
    return (
        f"time: about {duration(seconds / jobs)} for the {len(todo)} runs left on this machine, {jobs} at a time "
        f"(a run: {parts}; from the probes: early stopping may end runs sooner, and an untrained model's decoding "
        "makes the test part an upper bound)"
    )


# ---------------------------------------------------------------------------------------------------------
# The comparison, top to bottom
# ---------------------------------------------------------------------------------------------------------


def split_sizes(prepared: Path) -> dict:
    """{"train", "validation", "test"}: rows of the prepared dataset's splits (0 for a missing split)."""
    import datasets

    dataset = datasets.load_from_disk(str(prepared))
    return {name: len(dataset[name]) if name in dataset else 0 for name in ("train", "validation", "test")}


def check_prepared(prepared: Path) -> None:
    if not (prepared / "dataset_dict.json").is_file():
        raise CompareError(
            f"--prepared_dataset {prepared}: not a prepared dataset (no dataset_dict.json); make one with xlpe-prepare"
        )
    if not (prepared / "test").is_dir():
        raise CompareError(f"--prepared_dataset {prepared}: has no test split; the comparison scores the test split")
    if not (prepared / "tokenizer").is_dir():
        raise CompareError(f"--prepared_dataset {prepared}: holds no tokenizer/ (an xlpe-prepare output has one)")


def run_compare(
    request: CompareRequest,
    runner: Runner | None = None,
    echo=print,
    dry_run: bool = False,
    in_process: Runner | None = None,
) -> dict | None:
    """Prepare, probe, plan, train every (variant, seed), and write the report (module docstring). Returns the
    report (`compare_report.build_report`), or None for a `dry_run` (the plan is printed, nothing is run or
    written). `runner` runs every command (default: `subprocess_runner`; `in_process` instead when one job runs at
    a time). CompareError (one line) for a request that cannot be carried out, before any work where it can be
    found then."""
    out = request.output_dir
    check_variant_flags(request)
    if out.exists() and not out.is_dir():
        raise CompareError(f"--output_dir {out}: is a file, expected a directory")
    if request.prepared_dataset is not None:
        check_prepared(request.prepared_dataset)
    for name, path in request.data.items():
        if not Path(path).is_file():
            raise CompareError(f"--{name} {path}: no such file")
    record, old = request_record(request), load_record(out)
    if old is None and out.is_dir() and any(out.iterdir()):
        raise CompareError(
            f"--output_dir {out}: holds files but no {RECORD_FILE}: not an xlpe-compare folder; choose another"
        )
    added = check_record(old, record, out) if old is not None else []
    runs = request.runs()
    states = {request.run_dir(v, s).name: run_state(request.run_dir(v, s)) for v, s in runs}
    for variant, seed in runs:
        if states[request.run_dir(variant, seed).name] == "finished":
            check_finished_run(request.run_dir(variant, seed), train_argv(request, variant, seed))
    gpus = accelerators()
    jobs = request.jobs or default_jobs(gpus)
    runner = runner or (in_process if jobs == 1 and in_process is not None else subprocess_runner)
    prepared_ready = (request.prepared / "dataset_dict.json").is_file()
    sizes = split_sizes(request.prepared) if prepared_ready else None
    estimates = {v.name: probe_estimate(request, v, sizes) for v in request.variants} if sizes else None
    if added:
        echo(f"xlpe-compare: adding to {out}: {', '.join(added)}")
    echo(plan_text(request, states, jobs, estimates if estimates and all(estimates.values()) else None))
    if dry_run:
        return None
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / RECORD_FILE, json.dumps(record, indent=2) + "\n")
    logs = out / "logs"
    if not prepared_ready:
        step("preparation", "xlpe-prepare", prepare_argv(request), logs / "prepare.log", runner, echo)
        sizes = split_sizes(request.prepared)
    todo = [(v, s) for v, s in runs if states[request.run_dir(v, s).name] != "finished"]
    if todo and request.probe_steps:
        probes = [
            (f"probe {v.name}", "xlpe-train", probe_argv(request, v), logs / f"probe-{v.name}.log")
            for v in request.variants
            if probe_estimate(request, v, sizes) is None
        ]
        if run_all(probes, runner, jobs, gpus, echo):
            raise RunFailed("a timing probe failed (above, or in logs/probe-*.log): the variant's flags do not train")
        estimates = {v.name: probe_estimate(request, v, sizes) for v in request.variants}
        echo("xlpe-compare: estimate: " + estimate_text(request, states, jobs, estimates).split(": ", 1)[1])
    if request.needs_reorderer() and any(v.is_xlpe for v, _ in todo):
        step("reorderer", "xlpe-reorder", reorder_argv(request), logs / "reorderer.log", runner, echo)
    tasks = [
        (
            request.run_dir(v, s).name,
            "xlpe-train",
            train_argv(request, v, s) + resume_flags(states[request.run_dir(v, s).name]),
            logs / f"{request.run_dir(v, s).name}.log",
        )
        for v, s in todo
    ]
    for variant, seed in todo:  # a run trained again: its dev translations are made again
        dev_translations(request, variant, seed).unlink(missing_ok=True)
    failed = run_all(tasks, runner, jobs, gpus, echo)
    if failed:
        raise RunFailed(
            f"{len(failed)} of {len(tasks)} runs failed ({', '.join(failed)}); rerun the same command to resume them"
        )
    missing = [(v, s) for v, s in runs if not dev_translations(request, v, s).is_file()]
    if missing and write_dev_source(request) is not None:
        translations = [
            (
                f"dev {request.run_dir(v, s).name}",
                "xlpe-translate",
                translate_argv(request, v, s),
                logs / f"dev-{request.run_dir(v, s).name}.log",
            )
            for v, s in missing
        ]
        (out / DEV_FOLDER).mkdir(exist_ok=True)
        failed = run_all(translations, runner, jobs, gpus, echo)
        if failed:
            raise RunFailed(f"{len(failed)} dev translations failed ({', '.join(failed)}); rerun the same command")
    report = build_report(request)
    write_report(report, out, echo)
    return report


__all__ = [
    "DEFAULT_VARIANTS",
    "CompareError",
    "CompareRequest",
    "RunFailed",
    "Variant",
    "default_jobs",
    "parse_variant",
    "parse_variants",
    "run_compare",
    "subprocess_runner",
]
