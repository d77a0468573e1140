"""What each `xlpe-train` flag *is*, declared once beside the flag: whether the run record keeps it (its value, or
the digest of the input it names), whether a resume may change it, and whether the model card lists it.

Every consumer reads these facts instead of keeping a list of its own:

* the run record and the resume check (`reuse.run_record`, `reuse.verify_resume`): what is recorded, what a resume
  must match, what it may change (applied and listed in one line);
* the model card (`run_card.training_settings`): the settings it lists as they were in force;
* `--help` (`RunConfig`'s parser): each recorded flag's help ends with what a resume may do with it;
* the recipes' tables (`recipes.RECIPES`) say which flags a recipe sets (`recipes.recipe_flags`); the help shows it.

The package's own flags carry their facts in their dataclass field's metadata (`flag(...)` in `arguments.py`);
the flags inherited from transformers' `Seq2SeqTrainingArguments` get theirs from `INHERITED_FACTS` (transformers'
fields cannot carry ours), and a flag in neither is plumbing: not recorded. Standard library only (the console
script reads the facts before torch is imported)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

FACTS_KEY = "xlpe_flag_facts"  # the key of a field's metadata that holds its FlagFacts (never passed to argparse)

RECORD_VALUE = "value"  # the run record keeps the flag's value
RECORD_DIGEST = "digest"  # the run record keeps the digest of what the flag names (a local file or folder, a Hub id)
NOT_RECORDED = "no"  # not in the run record: where things are cached, credentials, output and speed plumbing
RECORD_PART = "part"  # recorded inside the record of an input the command makes itself (a tokenizer, alignments)
RESUME_MATCH = "match"  # a resume must give the recorded value (the restored optimizer and data order depend on it)
RESUME_APPLY = "apply"  # a resume may give another value: it is applied and listed ("resuming: applying changed")


@dataclass(frozen=True)
class FlagFacts:
    record: str = RECORD_VALUE  # RECORD_VALUE | RECORD_DIGEST | RECORD_PART | NOT_RECORDED
    resume: str = RESUME_MATCH  # RESUME_MATCH | RESUME_APPLY (only for a recorded flag)
    card: bool = False  # listed among the card's training settings (when set)

    def __post_init__(self):
        if self.record not in (RECORD_VALUE, RECORD_DIGEST, RECORD_PART, NOT_RECORDED):
            raise ValueError(f"FlagFacts.record must be value, digest, part or no, got {self.record!r}")
        if self.resume not in (RESUME_MATCH, RESUME_APPLY):
            raise ValueError(f"FlagFacts.resume must be match or apply, got {self.resume!r}")
        if self.record in (NOT_RECORDED, RECORD_PART) and self.resume == RESUME_APPLY:
            raise ValueError("FlagFacts: a flag the record does not keep has nothing for a resume to apply")

    def help_note(self) -> str:
        """What the facts add to the flag's `--help` line ("" for a flag recorded and matched, the common case)."""
        if self.record == NOT_RECORDED:
            return ""
        if self.resume == RESUME_APPLY:
            return "[a resume may change it]"
        if self.record == RECORD_DIGEST:
            return "[recorded by digest: a resume must name the same]"
        return ""


RECORDED = FlagFacts()  # recorded; a resume must give the same value (a flag of the package's without other facts)
APPLIED = FlagFacts(resume=RESUME_APPLY)  # recorded; a resume may change it
DIGEST = FlagFacts(record=RECORD_DIGEST)  # names an input: recorded as the digest of what it names
PART = FlagFacts(record=RECORD_PART)  # recorded inside the record of an input made here
PLUMBING = FlagFacts(record=NOT_RECORDED)  # not recorded (also: an inherited flag without an INHERITED_FACTS entry)
ON_CARD = FlagFacts(card=True)  # recorded, and listed on the card

# transformers' training arguments this package records (the optimisation, how long and how often, evaluation,
# precision); every other inherited flag is output, logging or device plumbing
INHERITED_FACTS: Mapping[str, FlagFacts] = {
    **dict.fromkeys(("data_seed", "lr_scheduler_kwargs", "warmup_ratio", "adam_beta1", "adam_beta2"), RECORDED),
    **dict.fromkeys(("adam_epsilon", "optim", "optim_args", "group_by_length", "train_sampling_strategy"), RECORDED),
    **dict.fromkeys(("per_device_train_batch_size", "gradient_accumulation_steps"), RECORDED),  # (the card: batches)
    **dict.fromkeys(("learning_rate", "lr_scheduler_type", "warmup_steps", "label_smoothing_factor"), ON_CARD),
    **dict.fromkeys(("weight_decay", "max_grad_norm", "seed"), ON_CARD),
    **dict.fromkeys(("max_steps", "num_train_epochs"), APPLIED),  # (the card lists whichever bounded the run)
    **dict.fromkeys(("logging_steps", "eval_steps", "save_steps", "save_total_limit"), APPLIED),
    **dict.fromkeys(("eval_strategy", "save_strategy", "logging_strategy", "per_device_eval_batch_size"), APPLIED),
    **dict.fromkeys(("generation_max_length", "generation_num_beams", "torch_compile"), APPLIED),
    **dict.fromkeys(("bf16", "fp16", "tf32"), APPLIED),  # (the card says the precision in words)
}


def facts_of(field: dataclasses.Field) -> FlagFacts:
    """The facts of a dataclass field: its own (`FACTS_KEY` in its metadata), else `INHERITED_FACTS`, else plumbing."""
    own = field.metadata.get(FACTS_KEY)
    if own is not None:
        return own
    return INHERITED_FACTS.get(field.name, PLUMBING)


def flag_facts(classes: Iterable[type]) -> dict[str, FlagFacts]:
    """{flag name: facts} over the fields of `classes` (the argument dataclasses), in field order."""
    return {field.name: facts_of(field) for cls in classes for field in dataclasses.fields(cls)}


def names_where(facts: Mapping[str, FlagFacts], **wanted) -> tuple[str, ...]:
    """The flags whose facts have the `wanted` values, e.g. `names_where(facts, resume=RESUME_APPLY)`."""
    return tuple(name for name, fact in facts.items() if all(getattr(fact, k) == v for k, v in wanted.items()))


# ---------------------------------------------------------------------------------------------------------
# Flags of an argparse command (`xlpe-reorder train`): the same facts, kept on the parser
# ---------------------------------------------------------------------------------------------------------


def add_flag(parser, *names: str, facts: FlagFacts = RECORDED, **kwargs):
    """`parser.add_argument(*names, **kwargs)` for a flag of a command whose run is recorded: its facts are kept on
    the parser (`parser_facts`) and noted in its help, as `xlpe-train`'s are."""
    note = facts.help_note()
    if note and kwargs.get("help"):
        kwargs["help"] = f"{kwargs['help']} {note}"
    action = parser.add_argument(*names, **kwargs)
    parser.__dict__.setdefault("_xlpe_flag_facts", {})[action.dest] = facts
    return action


def parser_facts(parser) -> dict[str, FlagFacts]:
    """{destination: facts} of the flags added with `add_flag` to `parser`."""
    return dict(parser.__dict__.get("_xlpe_flag_facts", {}))
