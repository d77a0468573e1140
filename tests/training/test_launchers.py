"""The launcher configs in examples/ (docs/multi_node_training.md), run on this one CPU machine as a cluster
would run them, as far as a CPU allows.

* `examples/accelerate/multi_node_ddp.yaml`: a real two-machine rendezvous on loopback. Two `accelerate launch`
  processes get the file and override only what a second machine would change (`--machine_rank 0/1`,
  `--main_process_ip 127.0.0.1`, a free `--main_process_port`, `--num_machines 2 --num_processes 2`). xlpe-train
  (`python -m xlpe.cli.train`) gets `--use_cpu`, so the distributed backend is gloo. `accelerate launch --cpu`
  cannot stand in: with several CPU processes or machines it needs an MPI hostfile (mpirun). Without one, each
  launcher starts one process of world size 1, which is two independent runs, not a rendezvous. The config's
  `distributed_type: MULTI_GPU` uses torchrun's rendezvous, which is what GPU machines use too.
* `examples/accelerate/fsdp_big.yaml`: accelerate's config loader reads it, and its FSDP plugin finds the layer
  classes it names in every family. Two CPU processes launched with the file (fp32 and sync_module_states off:
  bf16 mixed precision and module-state broadcasting need GPU kernels in torch/accelerate) shard a tiny XL PE
  model with the plugin's settings. The sharded model trains exactly like one unsharded model, and its
  checkpoints are saved whole (FULL_STATE_DICT) and averaged with `run.average_into`. It also generates through
  `ExtraInputsSeq2SeqTrainer.prediction_step`, and the saved model loads. xlpe-train itself cannot run under FSDP here:
  accelerate turns FSDP on only for GPU (or other accelerator) processes and falls back to DDP on CPU.
* `examples/slurm/train_multinode.sbatch`: run with bash under fake SLURM_* variables and stub
  `srun`/`scontrol`/`accelerate`, which record the accelerate command line built for each node.

About 65 s on 2 cores, so nothing here is marked slow (RUN_SLOW).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, TINY_MODEL_ARGS

DDP_CONFIG = REPO_ROOT / "examples" / "accelerate" / "multi_node_ddp.yaml"
FSDP_CONFIG = REPO_ROOT / "examples" / "accelerate" / "fsdp_big.yaml"
SBATCH = REPO_ROOT / "examples" / "slurm" / "train_multinode.sbatch"
LAUNCH = [sys.executable, "-m", "accelerate.commands.launch"]
TIMEOUT = 600


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def environment() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


# ---------------------------------------------------------------------------------------------------------
# Multi-machine DDP
# ---------------------------------------------------------------------------------------------------------

STEPS, PER_DEVICE = 3, 4
TINY_RUN = [
    "--model_type",
    "xlpe",
    *TINY_MODEL_ARGS,
    "--max_train_samples",
    "48",
    "--tokenizer_vocab_size",
    "300",
    "--dropout",
    "0",
    "--warmup_steps",
    "0",
    "--max_steps",
    str(STEPS),
    "--logging_steps",
    "1",
    "--per_device_train_batch_size",
    str(PER_DEVICE),
    "--save_strategy",
    "no",
    "--eval_strategy",
    "no",
    "--do_train",
    "True",
    "--do_eval",
    "False",
    "--do_predict",
    "False",
    "--report_to",
    "none",
    "--seed",
    "7",
    "--use_cpu",
    "--log_level",
    "info",
    "--log_level_replica",
    "info",
]


def test_multi_node_ddp_config_is_read_by_accelerate():
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(DDP_CONFIG))
    assert config.distributed_type.value == "MULTI_GPU" and config.num_machines > 1
    assert config.rdzv_backend == "static" and config.same_network
    assert config.num_processes % config.num_machines == 0  # processes per machine


@pytest.mark.slow  # two launchers; two processes of one launcher: test_distributed.py
def test_two_machines_rendezvous_on_loopback_and_train(tmp_path):
    """Two `accelerate launch --config_file multi_node_ddp.yaml` (machine ranks 0 and 1) form one job of two
    processes, train for a few steps, and the main process saves a model that loads."""
    output, port = tmp_path / "run", free_port()
    launchers = []
    with contextlib.ExitStack() as stack:
        for rank in (0, 1):
            command = [
                *LAUNCH,
                "--config_file",
                str(DDP_CONFIG),
                "--machine_rank",
                str(rank),
                "--main_process_ip",
                "127.0.0.1",
                "--main_process_port",
                str(port),
                "--num_machines",
                "2",
                "--num_processes",
                "2",
                "-m",
                "xlpe.cli.train",
                "--output_dir",
                str(output),
                "--cache_dir",
                str(tmp_path / "cache"),
                *TINY_RUN,
            ]
            log = stack.enter_context(open(tmp_path / f"machine{rank}.log", "w"))
            launchers.append(
                subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=environment())
            )
        try:
            codes = [launcher.wait(timeout=TIMEOUT) for launcher in launchers]
        finally:
            for launcher in launchers:
                if launcher.poll() is None:
                    launcher.kill()
    texts = [(tmp_path / f"machine{rank}.log").read_text() for rank in (0, 1)]
    assert codes == [0, 0], "\n\n".join(text[-3000:] for text in texts)

    # both machines' processes were in one job of world size 2
    for text in texts:
        assert f"Total train batch size (w. parallel, distributed & accumulation) = {2 * PER_DEVICE}" in text, text[
            -3000:
        ]
    # machine 0 holds the main process (trains the tokenizer); machine 1's process loaded it
    assert "training a joint bpe tokenizer" in texts[0] and "training a joint bpe tokenizer" not in texts[1]
    examples = int(re.search(r"Num examples = ([\d,]+)", texts[0]).group(1).replace(",", ""))
    state = json.loads((output / "trainer_state.json").read_text())
    assert state["global_step"] == STEPS
    last = [entry for entry in state["log_history"] if "loss" in entry][-1]
    assert last["epoch"] == pytest.approx(
        STEPS / math.ceil(examples / (2 * PER_DEVICE))
    )  # 2 processes' share of the epoch

    from xlpe import XLPEMarianMTModel

    model = XLPEMarianMTModel.from_pretrained(output)
    assert model.config.d_model == 16 and (output / "tokenizer.json").is_file()


# ---------------------------------------------------------------------------------------------------------
# FSDP for the big recipe
# ---------------------------------------------------------------------------------------------------------

FAMILY_LAYERS = {  # --model_type -> the classes fsdp_transformer_layer_cls_to_wrap must name
    "xlpe": "MarianEncoderLayer,MarianDecoderLayer",
    "dpe": "MarianEncoderLayer,MarianDecoderLayer",
    "vanilla": "MarianEncoderLayer,MarianDecoderLayer",
    "mvpe_pos": "BartEncoderLayer,BartDecoderLayer",
}


def tiny_family_model(family: str):
    from transformers import MarianConfig, MarianMTModel

    from xlpe.models import get_family

    sizes = {
        "vocab_size": 64,
        "d_model": 16,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 32,
        "decoder_ffn_dim": 32,
        "max_position_embeddings": 32,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "decoder_start_token_id": 0,
    }
    if family == "vanilla":
        return MarianMTModel(MarianConfig(**sizes))
    found = get_family(family)
    extra = {"pos_dim": 8} if family == "mvpe_pos" else {}
    return found.generation_model_class(found.config_class(**sizes, **extra))


def test_fsdp_config_is_valid_and_names_layer_classes_of_our_models():
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import FullyShardedDataParallelPlugin
    from transformers.models.bart.modeling_bart import (
        BartDecoderLayer,
        BartEncoderLayer,
    )
    from transformers.models.marian.modeling_marian import (
        MarianDecoderLayer,
        MarianEncoderLayer,
    )

    config = load_config_from_file(str(FSDP_CONFIG))
    fsdp = config.fsdp_config
    assert config.distributed_type.value == "FSDP" and config.mixed_precision == "bf16"
    assert fsdp["fsdp_version"] == 1 and fsdp["fsdp_sharding_strategy"] == "FULL_SHARD"
    assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert fsdp["fsdp_state_dict_type"] == "FULL_STATE_DICT"  # save_pretrained writes model.safetensors
    assert fsdp["fsdp_transformer_layer_cls_to_wrap"] == FAMILY_LAYERS["xlpe"]

    classes = {
        cls.__name__: cls for cls in (MarianEncoderLayer, MarianDecoderLayer, BartEncoderLayer, BartDecoderLayer)
    }
    for family, names in FAMILY_LAYERS.items():
        model = tiny_family_model(family)
        for name in names.split(","):  # the classes exist and the model is built of them
            assert any(isinstance(module, classes[name]) for module in model.modules()), (family, name)
        # accelerate's own lookup (raises "Could not find the transformer layer class ..." for a missing name)
        plugin = FullyShardedDataParallelPlugin(
            fsdp_version=1,
            auto_wrap_policy=fsdp["fsdp_auto_wrap_policy"],
            transformer_cls_names_to_wrap=names.split(","),
            sync_module_states=False,
        )
        plugin.set_auto_wrap_policy(model)
        if family == "mvpe_pos":  # the config's own names are Marian's: mvpe_pos must override them (documented)
            plugin = FullyShardedDataParallelPlugin(
                fsdp_version=1,
                auto_wrap_policy=fsdp["fsdp_auto_wrap_policy"],
                transformer_cls_names_to_wrap=fsdp["fsdp_transformer_layer_cls_to_wrap"].split(","),
                sync_module_states=False,
            )
            with pytest.raises(ValueError, match="Could not find the transformer layer class"):
                plugin.set_auto_wrap_policy(model)


FSDP_WORKER = r'''
"""One process of the FSDP check (test_launchers.py): shards a tiny XL PE model with the FSDP settings that
`accelerate launch --config_file fsdp_big.yaml` put into the environment, as accelerate's FSDP1 preparation
does on GPUs, and checks it against an unsharded copy."""
import copy, json, os, sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist
from accelerate.utils import FullyShardedDataParallelPlugin
from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel as FSDP, StateDictType
from transformers import Seq2SeqTrainingArguments

from xlpe import XLPEMarianConfig, XLPEMarianMTModel
from xlpe.training.run import average_into
from xlpe.training.trainer import ExtraInputsSeq2SeqTrainer

out = Path(sys.argv[1])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
plugin = FullyShardedDataParallelPlugin()  # from the FSDP_* variables accelerate launch set from the config file
precision = os.environ["ACCELERATE_MIXED_PRECISION"]
report = {"rank": rank, "world": world, "fsdp_version": plugin.fsdp_version, "sharding": plugin.sharding_strategy.name,
          "state_dict_type": plugin.state_dict_type.name, "wrap": plugin.transformer_cls_names_to_wrap,
          "use_orig_params": plugin.use_orig_params, "mixed_precision": precision}
torch.manual_seed(0)
config = XLPEMarianConfig(
    vocab_size=64, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
    encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32, dropout=0.0, reorder_predictor_dropout=0.0,
    pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=1, init_std=0.3,
)
model = XLPEMarianMTModel(config)
reference = copy.deepcopy(model)
plugin.set_auto_wrap_policy(model)  # accelerate's class lookup
sharded = FSDP(model, sharding_strategy=plugin.sharding_strategy, auto_wrap_policy=plugin.auto_wrap_policy,
               mixed_precision=plugin.mixed_precision_policy, use_orig_params=plugin.use_orig_params,
               cpu_offload=plugin.cpu_offload, backward_prefetch=plugin.backward_prefetch,
               forward_prefetch=plugin.forward_prefetch, limit_all_gathers=plugin.limit_all_gathers,
               device_id=torch.device("cpu"))
report["units"] = sorted(type(unit.module).__name__ for unit in FSDP.fsdp_modules(sharded))
report["local_numel"] = sum(p.numel() for p in sharded.parameters())
report["full_numel"] = sum(p.numel() for p in reference.parameters())


def full_state():
    # what FULL_STATE_DICT saving gathers; offload_to_cpu=True (accelerate's choice on GPUs) crashes CPU-only torch
    with FSDP.state_dict_type(
        sharded, StateDictType.FULL_STATE_DICT, FullStateDictConfig(offload_to_cpu=False, rank0_only=True)
    ):
        return sharded.state_dict()


generator = torch.Generator().manual_seed(1)
rows, length = 4 * world, 10
ids = torch.randint(2, 64, (rows, length), generator=generator)
labels = torch.randint(2, 64, (rows, length), generator=generator)
ids[:, -1] = labels[:, -1] = 1
order = torch.stack(
    [torch.cat([torch.randperm(length - 1, generator=generator), torch.tensor([length - 1])]) for _ in range(rows)]
)
batch = dict(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels, reorder_positions=order)
mine = {key: value[4 * rank: 4 * rank + 4] for key, value in batch.items()}  # this process's share of the batch
optimizer, reference_optimizer = (
    torch.optim.SGD(sharded.parameters(), lr=0.2),
    torch.optim.SGD(reference.parameters(), lr=0.2),
)
run_dir = out / "run"
report["losses"], report["reference_losses"], report["max_difference"] = [], [], []
for step in (1, 2):
    loss = sharded(**mine).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    loss = loss.detach()
    dist.all_reduce(loss)
    report["losses"].append(loss.item() / world)
    reference_loss = reference(**batch).loss  # the whole batch in one process
    reference_loss.backward()
    reference_optimizer.step()
    reference_optimizer.zero_grad()
    report["reference_losses"].append(reference_loss.item())
    state = full_state()
    if rank == 0:
        expected = reference.state_dict()
        report["max_difference"].append(
            max((state[k].double() - expected[k].double()).abs().max().item() for k in state)
        )
        sharded.module.save_pretrained(run_dir / f"checkpoint-{step}", state_dict=state)
    dist.barrier()

# xlpe-train's own code on the sharded model: the checkpoint average, and generation at evaluation
trainer = ExtraInputsSeq2SeqTrainer(model=reference, args=Seq2SeqTrainingArguments(
    output_dir=str(run_dir), use_cpu=True, predict_with_generate=True, report_to="none"))
trainer.model = trainer.model_wrapped = sharded  # what the Trainer holds after accelerate's FSDP preparation
average_into(
    trainer, SimpleNamespace(output_dir=str(run_dir), average_last_checkpoints=2, early_stopping_patience=None)
)
state = full_state()
if rank == 0:
    sharded.module.save_pretrained(out / "final", state_dict=state)
source = {key: mine[key] for key in ("input_ids", "attention_mask", "labels")}
_, generated, _ = trainer.prediction_step(sharded, source, prediction_loss_only=False, max_new_tokens=6, num_beams=1,
                                          do_sample=False, return_dict_in_generate=True, output_scores=True)
report["input_ids"], report["generated"] = mine["input_ids"].tolist(), generated.sequences.tolist()
report["scores"] = torch.stack(generated.scores).tolist()
(out / f"rank{rank}.json").write_text(json.dumps(report))
dist.barrier()
dist.destroy_process_group()
'''


def test_fsdp_config_shards_trains_averages_generates_and_saves_on_two_cpu_processes(tmp_path):
    """fsdp_big.yaml launched for 2 CPU processes (overridden on the command line: fp32 instead of bf16, no
    module-state broadcast). Neither can run on a CPU. The tiny XL PE model is sharded one FSDP unit per
    Marian layer, trains step for step like the unsharded model on the whole batch, and is saved whole. The
    final model is the average of its checkpoints and generates like the saved model loaded in one process."""
    import torch
    from safetensors.torch import load_file

    from xlpe import XLPEMarianMTModel

    worker = tmp_path / "fsdp_worker.py"
    worker.write_text(FSDP_WORKER)
    out = tmp_path / "out"
    command = [
        *LAUNCH,
        "--config_file",
        str(FSDP_CONFIG),
        "--num_machines",
        "1",
        "--num_processes",
        "2",
        "--main_process_ip",
        "127.0.0.1",
        "--main_process_port",
        str(free_port()),
        "--mixed_precision",
        "no",
        "--fsdp_sync_module_states",
        "false",
        str(worker),
        str(out),
    ]
    run = subprocess.run(
        command, check=False, capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path, env=environment()
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    reports = [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]

    for report in reports:  # the settings came from the config file through accelerate launch
        assert report["world"] == 2 and report["fsdp_version"] == 1 and report["sharding"] == "FULL_SHARD"
        assert report["state_dict_type"] == "FULL_STATE_DICT" and report["use_orig_params"] is True
        assert report["wrap"] == ["MarianEncoderLayer", "MarianDecoderLayer"] and report["mixed_precision"] == "no"
        assert report["units"] == ["MarianDecoderLayer"] * 2 + ["MarianEncoderLayer"] * 2 + ["XLPEMarianMTModel"]
        assert report["local_numel"] < 0.6 * report["full_numel"]  # each process holds about half
        assert report["losses"] == pytest.approx(report["reference_losses"], rel=1e-5)
    assert sum(report["local_numel"] for report in reports) >= reports[0]["full_numel"]
    assert max(reports[0]["max_difference"]) < 1e-5  # gathered weights = the unsharded model's after each step

    checkpoints = [load_file(str(out / "run" / f"checkpoint-{step}" / "model.safetensors")) for step in (1, 2)]
    final = load_file(str(out / "final" / "model.safetensors"))
    assert set(final) == set(checkpoints[0])
    for name, tensor in final.items():
        if tensor.is_floating_point():
            assert torch.allclose(tensor, (checkpoints[0][name] + checkpoints[1][name]) / 2, atol=1e-6), name
    averaged = load_file(str(out / "run" / "model.safetensors"))  # what save_averaged_model wrote
    assert all(torch.equal(averaged[name], final[name]) for name in final)

    model = XLPEMarianMTModel.from_pretrained(out / "final").eval()
    for report in reports:
        ids = torch.tensor(report["input_ids"])
        with torch.no_grad():
            expected = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=6,
                num_beams=1,
                do_sample=False,
                return_dict_in_generate=True,
                output_scores=True,
            )
        assert report["generated"] == expected.sequences.tolist()
        assert torch.allclose(torch.tensor(report["scores"]), torch.stack(expected.scores), atol=1e-4)


def test_checkpoint_averaging_leaves_an_fsdp_checkpoints_training_state_behind(tmp_path):
    """A checkpoint of an FSDP run (FULL_STATE_DICT) also holds `pytorch_model_fsdp.bin` (a torch.save copy of
    the weights) and `optimizer.bin`; the averaged model directory gets neither."""
    import torch
    from safetensors.torch import save_file

    from xlpe.training.checkpoint_averaging import save_averaged_model

    checkpoints = []
    for step, value in ((1, 1.0), (2, 3.0)):
        folder = tmp_path / "run" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        save_file({"w": torch.full((2,), value)}, str(folder / "model.safetensors"))
        for name in (
            "config.json",
            "tokenizer.json",
            "pytorch_model_fsdp.bin",
            "optimizer.bin",
            "scheduler.pt",
            "trainer_state.json",
            "rng_state_0.pth",
        ):
            (folder / name).write_text("{}")
        checkpoints.append(folder)
    averaged = save_averaged_model(checkpoints, tmp_path / "final")
    assert averaged["w"].tolist() == [2.0, 2.0]
    assert sorted(path.name for path in (tmp_path / "final").iterdir()) == [
        "averaged_checkpoints.json",
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]


# ---------------------------------------------------------------------------------------------------------
# Slurm
# ---------------------------------------------------------------------------------------------------------

STUB_SRUN = r"""#!/bin/bash
# records its argv, then runs the command once per node of the fake allocation, as srun does on each node
printf '%s\0' "$@" > "$STUB_LOG/srun.args"
while [[ $1 == -* ]]; do shift; done
for ((node = 0; node < SLURM_NNODES; node++)); do
    SLURM_NODEID=$node SLURM_PROCID=$node "$@" || exit $?
done
"""
STUB_SCONTROL = r"""#!/bin/bash
[[ $1 == show && $2 == hostnames && $3 == "gpu-node-[017-018]" ]] || exit 3
printf 'gpu-node-017\ngpu-node-018\n'
"""
STUB_ACCELERATE = r"""#!/bin/bash
printf '%s\0' "$@" > "$STUB_LOG/accelerate.$SLURM_NODEID"
"""


def run_sbatch(tmp_path, arguments, **extra_env):
    stubs, log = tmp_path / "bin", tmp_path / "log"
    stubs.mkdir(exist_ok=True)
    log.mkdir(exist_ok=True)
    for name, text in (("srun", STUB_SRUN), ("scontrol", STUB_SCONTROL), ("accelerate", STUB_ACCELERATE)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    env.update(
        {
            "PATH": f"{stubs}{os.pathsep}{env['PATH']}",
            "STUB_LOG": str(log),
            "SLURM_JOB_ID": "4242",
            "SLURM_NNODES": "2",
            "SLURM_JOB_NODELIST": "gpu-node-[017-018]",
            "SLURM_GPUS_ON_NODE": "4",
            **extra_env,
        }
    )
    run = subprocess.run(
        ["bash", str(SBATCH), *arguments],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        env=env,
    )
    return run, log


def recorded(path: Path) -> list[str]:
    return path.read_text().split("\0")[:-1]


def test_slurm_script_starts_one_accelerate_launch_per_node(tmp_path):
    arguments = ["--train_source_file", "/shared/data/train set.en", "--output_dir", "/shared/runs/big"]
    run, log = run_sbatch(tmp_path, arguments)
    assert run.returncode == 0, run.stderr
    srun = recorded(log / "srun.args")
    assert srun[:2] == ["--ntasks-per-node=1", "--kill-on-bad-exit=1"] and srun[2] == "bash"
    for node in (0, 1):
        assert recorded(log / f"accelerate.{node}") == [
            "launch",
            "--config_file",
            "examples/accelerate/fsdp_big.yaml",
            "--num_machines",
            "2",
            "--num_processes",
            "8",
            "--machine_rank",
            str(node),
            "--main_process_ip",
            "gpu-node-017",
            "--main_process_port",
            "29500",
            "-m",
            "xlpe.cli.train",
            "--recipe",
            "big",
            *arguments,
        ]
    assert (REPO_ROOT / "examples" / "accelerate" / "fsdp_big.yaml").is_file()


def test_slurm_script_settings_from_the_environment(tmp_path):
    run, log = run_sbatch(
        tmp_path,
        ["--output_dir", "runs/x"],
        CONFIG_FILE="examples/accelerate/multi_node_ddp.yaml",
        GPUS_PER_NODE="2",
        MAIN_PROCESS_IP="10.1.2.3",
        MAIN_PROCESS_PORT="29555",
    )
    assert run.returncode == 0, run.stderr
    command = recorded(log / "accelerate.1")
    assert command[command.index("--config_file") + 1] == "examples/accelerate/multi_node_ddp.yaml"
    assert command[command.index("--num_processes") + 1] == "4"
    assert command[command.index("--main_process_ip") + 1] == "10.1.2.3"
    assert command[command.index("--main_process_port") + 1] == "29555"
    assert command[command.index("--machine_rank") + 1] == "1"

    run, log = run_sbatch(tmp_path, [], CONFIG_FILE="no/such.yaml")
    assert run.returncode == 2 and "no accelerate config no/such.yaml" in run.stderr
    run, log = run_sbatch(tmp_path, [], SLURM_NNODES="")
    assert run.returncode != 0 and "submit this script with sbatch" in run.stderr
