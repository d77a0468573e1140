"""What each flag of `xlpe-reorder train` / `jackknife` *is*, declared beside it with `add_flag`: whether the
command's record keeps it (its value, or the digest of the input it names), whether a rerun may change it. The
records and the reruns of those commands read these facts (`xlpe.cli.reorder`). `xlpe-train` needs none: its
record keeps every argument and its resume rule is one allow-list (`xlpe.training.reuse.RESUME_MAY_CHANGE`).
Standard library only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

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
PLUMBING = FlagFacts(record=NOT_RECORDED)  # not recorded


def names_where(facts: Mapping[str, FlagFacts], **wanted) -> tuple[str, ...]:
    """The flags whose facts have the `wanted` values, e.g. `names_where(facts, resume=RESUME_APPLY)`."""
    return tuple(name for name, fact in facts.items() if all(getattr(fact, k) == v for k, v in wanted.items()))


# ---------------------------------------------------------------------------------------------------------
# The flags of an argparse command: their facts kept on the parser
# ---------------------------------------------------------------------------------------------------------


def add_flag(parser, *names: str, facts: FlagFacts = RECORDED, **kwargs):
    """`parser.add_argument(*names, **kwargs)` for a flag of a command whose run is recorded: its facts are kept on
    the parser (`parser_facts`) and noted in its help."""
    note = facts.help_note()
    if note and kwargs.get("help"):
        kwargs["help"] = f"{kwargs['help']} {note}"
    action = parser.add_argument(*names, **kwargs)
    parser.__dict__.setdefault("_xlpe_flag_facts", {})[action.dest] = facts
    return action


def parser_facts(parser) -> dict[str, FlagFacts]:
    """{destination: facts} of the flags added with `add_flag` to `parser`."""
    return dict(parser.__dict__.get("_xlpe_flag_facts", {}))
