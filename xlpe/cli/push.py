"""`xlpe-push`: upload a trained model directory to the Hub (weights, tokenizer, remote code, model card);
`xlpe.training.push` does the work. `--dry_run` checks and completes the folder without uploading.

A push that cannot happen (HF_HUB_OFFLINE set, no token, the Hub unreachable or refusing the token, a folder
without tokenizer or weights) is one line and exit status 2, and leaves the folder as it was."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from . import (
    CommandLineError,
    canonical_flags,
    check_input_file,
    console_script,
    did_you_mean_directory,
    read_json_input,
    user_error,
)

PROG = "xlpe-push"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", help="folder written by model.save_pretrained + tokenizer.save_pretrained")
    parser.add_argument("repo_id", help="Hub repository, e.g. user/xlpe-de-en")
    parser.add_argument("--token", help="Hub token (default: HF_TOKEN or the saved login)")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--endpoint", help="Hub endpoint (default: HF_ENDPOINT or huggingface.co)")
    parser.add_argument("--revision", help="branch to commit to (default: main)")
    parser.add_argument("--commit_message", default="Upload xlpe translation model")
    card = parser.add_argument_group(
        "model card (a card xlpe-train wrote is rendered again with REPO_ID unless "
        "edited since; another is written when README.md is missing or with "
        "--regenerate_card)"
    )
    card.add_argument("--regenerate_card", action="store_true")
    card.add_argument("--language", nargs="+", dest="languages", help="ISO codes, source first: de en")
    card.add_argument(
        "--license",
        help="the model's license on the card (SPDX id, e.g. apache-2.0); default: xlpe-train's --license, else none",
    )
    card.add_argument("--dataset", nargs="+", dest="datasets", help="training data (Hub ids or names)")
    card.add_argument("--base_model", help="Hub id of the checkpoint the model was initialised from")
    card.add_argument(
        "--example_source",
        help="source sentence for the usage snippets (default: the first test "
        "sentence of the run when xlpe-train wrote the card)",
    )
    card.add_argument(
        "--eval_results",
        nargs="+",
        default=[],
        help="JSON files written by `xlpe-evaluate bleu ... --dataset_name ... --dataset_type ...`",
    )
    parser.add_argument("--dry_run", action="store_true", help="complete and check the folder, do not upload")
    return canonical_flags(parser)


@console_script(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if not Path(args.model_dir).is_dir():
            hint = did_you_mean_directory(args.model_dir)
            raise CommandLineError(f"model_dir {args.model_dir}: no such local directory{hint}")
        for path in args.eval_results:
            check_input_file(path, "--eval_results")
        from ..features.language_codes import check_language_code

        for code in args.languages or ():
            check_language_code(code, "--language")
        card_kwargs = {
            "repo_id": args.repo_id,
            "languages": args.languages,
            "license": args.license,
            "datasets": args.datasets,
            "base_model": args.base_model,
            "example_source": args.example_source,
            "eval_results": [read_json_input(path, "--eval_results") for path in args.eval_results],
        }
        from ..features.artefacts import DirectoryInUse, directory_lock

        try:  # the folder is completed (card, code files) and read for the upload under its lock: a run writing
            lock = directory_lock(args.model_dir, f"xlpe-push {args.model_dir}")  # there is named, nothing written
            lock.__enter__()
        except DirectoryInUse as error:
            raise CommandLineError(f"model_dir {error}") from None
        try:
            info = _push(args, card_kwargs)
        finally:
            lock.__exit__(None, None, None)
    except (CommandLineError, ValueError, OSError) as error:  # ValueError: a folder that cannot be completed,
        return user_error(PROG, " ".join(str(error).split()))  # a Hub that cannot be used (PushError)
    if info is not None:
        print(json.dumps({"repo_id": args.repo_id, "commit_url": str(info.commit_url), "oid": info.oid}))
    return 0


def _push(args, card_kwargs):
    """The dry run (prints the files the upload would send; returns None) or the upload (its CommitInfo)."""
    from ..training.push import prepare_upload_folder, push_model, upload_file_list

    if args.dry_run:  # the files the upload would send (checkpoints and other ignored files left out, counted)
        prepare_upload_folder(args.model_dir, card_kwargs, regenerate_card=args.regenerate_card)
        files, left_out = upload_file_list(args.model_dir)
        print(json.dumps({"folder": args.model_dir, "ready": True, "files": files, "left_out": left_out}))
        return None
    # the Hub's usability (offline, token, reachable) is checked before the folder is written to
    return push_model(
        args.model_dir,
        args.repo_id,
        token=args.token,
        private=args.private or None,
        endpoint=args.endpoint,
        revision=args.revision,
        commit_message=args.commit_message,
        card_kwargs=card_kwargs,
        regenerate_card=args.regenerate_card,
    )


if __name__ == "__main__":
    sys.exit(main())
