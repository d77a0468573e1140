"""`RunConfig`: the command line parsed once (plain `HfArgumentParser`, defaults suppressed) into the flags given,
the argument groups built from them over the recipes' defaults; the run record is every argument."""

from __future__ import annotations

import dataclasses
import json

import pytest

from xlpe.training import arguments, flag_facts, run_config
from xlpe.training.errors import UsageError
from xlpe.training.reuse import RESUME_CHANGEABLE, run_record
from xlpe.training.run_card import card_flags

FILES = ["--train_source_file", "a.de", "--train_target_file", "a.en", "--source_lang", "de", "--target_lang", "en"]


def test_the_flags_given_are_what_the_one_parse_saw_typed_by_their_fields(tmp_path):
    config = run_config.parse_run_config(
        ["--output-dir", str(tmp_path), "--max_steps", "5", "--no_predict_with_generate", "--learning_rate", "3e-4"]
        + ["--do_train", "--lr_scheduler_type", "cosine", "--do_eval", "false"]
    )
    assert dict(config.given) == {
        "output_dir": str(tmp_path),
        "max_steps": 5,
        "predict_with_generate": False,
        "learning_rate": 3e-4,
        "do_train": True,
        "lr_scheduler_type": "cosine",
        "do_eval": False,
    }
    assert config.explicit_stages == {"do_train", "do_eval"}
    assert config.training.max_steps == 5 and config.training.lr_scheduler_type == "cosine"
    assert (config.training.do_train, config.training.do_eval) == (True, False)
    with pytest.raises(AttributeError):  # frozen: a run's configuration is not patched on the way
        config.recipe = "big"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--max_steps", "abc"], "--max_steps/--max-steps: invalid int value: 'abc'"),
        (["--lr_scheduler_type", "cosin"], "invalid choice: 'cosin'"),
        (["--warmup_stepz", "3"], "unrecognized arguments: --warmup_stepz 3 (did you mean --warmup_steps?)"),
        (["--do_train", "maybe"], "--do_train/--do-train: Truthy value expected: got maybe"),
        (["--max_steps"], "expected one argument"),
    ],
)
def test_a_command_line_that_cannot_be_read_is_one_usage_error(argv, message):
    with pytest.raises(UsageError) as error:
        run_config.parse_run_config(["--output_dir", "x", *argv])
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_whole_run_parses_its_command_line_once(tmp_path, monkeypatch):
    """The console script reads argv once (before torch); the recipe chosen after the data is read rebuilds the
    groups from the flags given, never from argv, and transformers' parser never reads argv."""
    from transformers import HfArgumentParser

    from xlpe.cli import train as train_cli

    parses = []
    real = run_config.read_given
    monkeypatch.setattr(run_config, "read_given", lambda *a: parses.append(a) or real(*a))
    monkeypatch.setattr(HfArgumentParser, "parse_args_into_dataclasses", lambda *a, **k: pytest.fail("argv re-read"))
    rebuilt = []
    real_build = run_config.build_run_config
    monkeypatch.setattr(run_config, "build_run_config", lambda *a, **k: rebuilt.append(k) or real_build(*a, **k))
    (tmp_path / "a.de").write_text("ich sehe das haus\ndas haus ist rot\n" * 20)
    (tmp_path / "a.en").write_text("i see the house\nthe house is red\n" * 20)
    argv = [item.replace("a.", str(tmp_path / "a.")) for item in FILES]
    argv += ["--output_dir", str(tmp_path / "run"), "--max_steps", "1", "--d_model", "16", "--ffn_dim", "32"]
    argv += ["--encoder_layers", "1", "--decoder_layers", "1", "--attention_heads", "2", "--tokenizer_model", "bpe"]
    argv += ["--tokenizer_vocab_size", "120", "--do_eval", "false", "--do_predict", "false", "--report_to", "none"]
    assert train_cli.cli(argv) == 0
    assert len(parses) == 1  # the console script's one parse
    assert [k.get("recipe") for k in rebuilt] == [None, "tiny"]  # built, then rebuilt with the recipe chosen
    recorded = json.loads((tmp_path / "run" / "recipe.json").read_text())
    assert recorded["recipe"] == "tiny"  # 40 pairs on a CPU


def test_a_flag_a_pending_recipe_gives_meaning_to_is_not_refused_before_the_recipe_is_chosen():
    """`--early_stopping_patience 6` with the recipe chosen once the data is read: the recipe evaluates every N
    steps, so the flag is fine (it was refused, "needs periodic evaluation", before the recipe was in force)."""
    config = run_config.parse_run_config([*FILES, "--output_dir", "x", "--early_stopping_patience", "6"])
    assert config.recipe_pending and config.recipe is None
    chosen = config.with_recipe("small", train_pairs=12_000)
    assert chosen.training.early_stopping_patience == 6 and chosen.training.eval_strategy == "steps"
    assert chosen.training.num_train_epochs == 12.5 and not chosen.recipe_pending
    with pytest.raises(UsageError, match="needs periodic evaluation"):  # no recipe at all: refused at once
        run_config.parse_run_config([*FILES, "--output_dir", "x", "--early_stopping_patience", "6", "--recipe", "none"])


def test_the_record_holds_every_argument_and_the_inputs_by_digest(tmp_path):
    config = run_config.parse_run_config(["--output_dir", str(tmp_path), "--recipe", "small", "--hub_token", "secret"])
    record = run_record(config)
    every = {field.name for group in config.groups() for field in dataclasses.fields(group) if field.init}
    assert {key[2:] for key in record.options} == every | {"record"}  # inherited transformers fields included
    assert {"neftune_noise_alpha", "dataloader_drop_last", "ignore_data_skip", "auto_find_batch_size"} <= every
    assert record.options["--hub_token"] is True and "secret" not in json.dumps(record.to_json())  # never the value
    assert record.options["--learning_rate"] == 1e-3 and record.options["--dataset_name"] == "builtin:synthetic"
    assert RESUME_CHANGEABLE <= every | {"token"}  # the allow-list names real arguments only
    assert "learning_rate" in card_flags()[0] and "num_beams" in card_flags()[1]


def test_adding_a_flag_is_one_field(monkeypatch):
    """A field added to an argument dataclass is a flag, parsed, in the groups and in the run record."""
    import dataclasses as dc

    extra = dc.make_dataclass(
        "Extra",
        [("my_new_flag", int, dc.field(default=3, metadata={"help": "a new flag"}))],
        bases=(arguments.DataTrainingArguments,),
    )
    model, _, training = arguments.argument_classes()
    monkeypatch.setattr(run_config, "argument_classes", lambda: (model, extra, training))
    monkeypatch.setattr(run_config, "_PARSERS", {})
    config = run_config.parse_run_config(["--output_dir", "x", "--my_new_flag", "5"])
    assert config.data.my_new_flag == 5 and dict(config.given)["my_new_flag"] == 5
    assert run_record(config).options["--my_new_flag"] == 5
    assert "--my_new_flag" in run_config.flag_parser().format_help()


def test_help_is_the_parsers_text_served_from_the_cache(tmp_path, monkeypatch):
    from xlpe.cli.train import help_text
    from xlpe.training import command_line

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert command_line.cached_help() is None
    text = help_text()  # built by the parser, then cached
    assert text == run_config.flag_parser().format_help() and "--max_steps MAX_STEPS" in text
    cached = command_line.cached_help()
    assert cached["help"] == text and "--neftune_noise_alpha" in cached["options"]
    argv = ["--max_stepz", "3", "--max_steps=4", "--learning_r", "1"]  # (a unique prefix is argparse's abbreviation)
    assert command_line.unknown_options(argv, cached["options"]) == ["--max_stepz", "3"]


def test_every_flag_has_help():
    own = [field for cls in arguments.argument_classes() for field in dataclasses.fields(cls) if field.init]
    assert len(own) > 150
    assert all(
        field.metadata.get("help") for field in own if field.name in arguments.ModelArguments.__dataclass_fields__
    )


def test_xlpe_reorder_records_its_runs_from_the_same_facts():
    """`xlpe-reorder train` and `jackknife` declare their flags' facts with `add_flag`: their records keep the
    flags recorded by value (the tokenizer and alignment options inside what they make), a resume may change what
    the facts say (jackknife's --oracle_share), and the help says which flags are recorded by digest."""
    from xlpe.cli.reorder import build_parser, command_facts, recorded_options

    parser = build_parser()
    args = parser.parse_args(["train", "--source", "s", "--target", "t", "--output_dir", "o", "--decoder", "rank"])
    facts = command_facts("train")
    assert set(recorded_options("train", args)) == {
        name for name, fact in facts.items() if fact.record == flag_facts.RECORD_VALUE
    }
    assert {"source", "target", "tokenizer", "alignments", "prepared"} == {
        name for name, fact in facts.items() if fact.record == flag_facts.RECORD_DIGEST
    }
    assert facts["vocab_size"].record == flag_facts.RECORD_PART and facts["cache_dir"].record == "no"
    assert flag_facts.names_where(command_facts("jackknife"), resume="apply") == ("oracle_share",)
    commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    text = " ".join(commands.choices["train"].format_help().split())
    assert "[recorded by digest: a resume must name the same]" in text
