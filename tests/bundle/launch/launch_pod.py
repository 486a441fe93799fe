"""A temporary pod whose image holds a supported slime row's own source, for launcher tests.

The image tree is slime at the row's commit (its `slime/` package and `scripts/models/`
from the upstream snapshot), Megatron-LM's snapshot as MEGATRON_DIR, SGLang's argument
modules of the row's release (tests/support/slime_upstream), and two stand-ins for what
needs GPUs: `pod_image/train.py` (records the argv it is exec'd with instead of training)
and `pod_image/pylib` (torch_memory_saver's preload library, by file name; a test may lay
out its own). The launcher runs as it does in the driver's pod: it builds slime's real
parser in a subprocess, reads the checkpoint directory, writes slime's YAML files and execs
train.py. The pod is a GPU worker, where agentrl's RayJob runs the driver: torch's stand-in
sees `gpusPerNode` devices.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from launch_trees import EXAMPLE_C, REPO, cuda_toolkit, example_doc, experiment, touch

if str(REPO) not in sys.path:  # tests.support, shared with other test dirs
    sys.path.insert(0, str(REPO))

from tests.support import loader_cache, slime_upstream
from tests.support.tiny_tokenizer import build_tokenizer

import agentrl
from agentrl.render.defaults import OperatorDefaults
from agentrl.render.objects import runtime_config

POD_IMAGE = Path(__file__).parent / "pod_image"
# The agentrl these tests import (a checkout on PYTHONPATH, or the installed one): the pod's
# launcher runs it too, not whatever the interpreter would find on its own.
AGENTRL_PATH = Path(agentrl.__file__).resolve().parents[1]
SECRET = "wandb-secret-value-123"
HEADER_SECRET = "tok-xyz"
BASE_PATH = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"

# config.json of the released checkpoints the examples name (the fields slime compares with
# MODEL_ARGS before training: a mismatch is an error in slime's own parse).
HF_CONFIGS: dict[str, dict[str, Any]] = {
    "qwen2.5-7B": {
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "vocab_size": 152064,
    },
    "qwen2.5-3B": {
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "num_attention_heads": 16,
        "num_hidden_layers": 36,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
        "vocab_size": 151936,
    },
}


def megatron_checkpoint(path: Path, tracker: str = "release") -> Path:
    """A directory Megatron's loader takes: the tracker file and the iteration it names."""
    name = "release" if tracker == "release" else f"iter_{int(tracker):07d}"
    (path / name).mkdir(parents=True, exist_ok=True)
    (path / name / "common.pt").write_bytes(b"")
    (path / "latest_checkpointed_iteration.txt").write_text(tracker)
    return path


class Pod:
    """A temporary pod filesystem: image, models, data, checkpoints, CUDA, runtime config."""

    def __init__(
        self,
        root: Path,
        *,
        row: str = "fa3c990",
        extra_args: list[str] | None = None,
        megatron_ref: bool = False,
        slime_package: bool = True,
        checkpoint: bool = True,
        pylib: Path = POD_IMAGE / "pylib",
        gang: bool = False,
        env: list[dict[str, Any]] | None = None,
    ) -> None:
        self.root, self.row, self.pylib = root, row, pylib
        self.record = root / "record.json"
        self.files_dir = root / "slime-files"
        self.image = root / "image" / "slime"
        self.image.mkdir(parents=True)
        upstream = slime_upstream.slime_dir(row)
        if slime_package:
            (self.image / "slime").symlink_to(upstream / "slime")
        (self.image / "scripts").symlink_to(upstream / "scripts")
        (self.image / "train.py").write_text((POD_IMAGE / "train.py").read_text())
        doc = example_doc(EXAMPLE_C)
        spec = doc["spec"]
        model_type = spec["model"]["type"]
        hf = touch(root, "models/qwen/config.json", json.dumps(HF_CONFIGS[model_type])).parent
        build_tokenizer().save(str(hf / "tokenizer.json"))  # the preflight wants a vocabulary
        spec["model"]["path"] = str(hf)
        spec["model"]["refLoad"] = str(
            megatron_checkpoint(root / "models" / "qwen-megatron") if megatron_ref else hf
        )
        row_text = json.dumps({"prompt": "1+1?", "metadata": {"answer": "2"}}) + "\n"
        spec["data"]["train"] = str(touch(root, "data/train.jsonl", row_text * 3))
        for i, s in enumerate(spec["data"]["eval"]):
            s["path"] = str(touch(root, f"data/eval{i}.jsonl", row_text))
        self.checkpoint = root / "ckpt" / "run1"
        if checkpoint:
            spec["checkpoint"] = {"path": str(self.checkpoint), "saveInterval": 5}
        spec["tracking"] = {"wandb": {"project": "p", "apiKeySecret": {"name": "w", "key": "k"}}}
        # Its loader cache: this machine's, with one CUDA runtime, which its toolkit matches.
        self.bin = loader_cache.install(root)
        self.path = f"{self.bin}:{BASE_PATH}"
        cuda_toolkit(root, "/cuda", loader_cache.pod_major())
        spec["runtime"] = {
            "cudaHome": str(root / "cuda"),
            "slimeDir": str(self.image),
            "extraArgs": ["--seed", "1234"] if extra_args is None else extra_args,
            # The pod stands for one GPU worker without torch.distributed; the gang
            # preflight has its own gang (test_gang_preflight.py). Off unless asked for.
            "preflight": {"gang": gang},
            "env": env or [],
        }
        doc["metadata"]["name"] = "http-agent"
        self.exp = experiment(doc)
        self.config_path = root / "config.json"
        # The config the operator renders for this experiment, so the launcher reads what
        # the renderer writes (wandb and header variables named, runtime.env left out).
        config = runtime_config(self.exp, OperatorDefaults(bundle_version="t"))
        self.config_path.write_text(config.to_json())

    def env(self, **extra: str) -> dict[str, str]:
        base = {
            "PATH": self.path,
            "PYTHONPATH": f"{self.pylib}:{AGENTRL_PATH}",
            "MEGATRON_DIR": str(slime_upstream.MEGATRON),
            "AGENTRL_TEST_RECORD": str(self.record),
            "WANDB_API_KEY": SECRET,
            "AGENTRL_HTTP_HEADER_0": f"Bearer {HEADER_SECRET}",
            "LD_LIBRARY_PATH": "/usr/local/cuda-11.8/lib64:/opt/efa/lib",
            "HOME": str(self.root),
            # The GPU worker the RayJob places the driver on (tests/support/upstream_site/
            # torch_cuda.py); 0 is agentrl's GPU-less head.
            "AGENTRL_POD_GPUS": str(self.exp.spec.resources.gpus_per_node),
        }
        return {**slime_upstream.env(self.row, base), **extra}

    def command(self, *flags: str) -> list[str]:
        cmd = [sys.executable, "-m", "agentrl.bundle.launch", "--config", str(self.config_path)]
        return [*cmd, "--files-dir", str(self.files_dir), *flags]

    def launch(self, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*flags),
            check=False,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=300,
        )

    def launched(self) -> tuple[list[str], dict[str, str]]:
        """Launch with the spec as it is, which must succeed: slime's argv and the driver's
        env (`slime_args`, `driver_env`)."""
        done = self.launch()
        assert done.returncode == 0, done.stderr
        return self.slime_args(), self.driver_env()

    def recorded(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.record.read_text())
        return result

    def driver_env(self, pod_gpus: int | None = None) -> dict[str, str]:
        """The env train.py was exec'd with, in the pod the driver runs in: a GPU worker
        with `gpusPerNode` GPUs unless `pod_gpus` says otherwise (0: agentrl's GPU-less
        head). See tests/support/upstream_site/torch_cuda.py."""
        gpus = self.exp.spec.resources.gpus_per_node if pod_gpus is None else pod_gpus
        env: dict[str, str] = self.recorded()["env"]
        return {**env, "AGENTRL_POD_GPUS": str(gpus)}

    def log_files(self) -> list[Path]:
        """This pod's per-attempt log files on the checkpoint volume, oldest first."""
        return sorted((self.checkpoint / "logs").glob("*.log"), key=lambda p: p.stat().st_mtime)

    def slime_args(self) -> list[str]:
        """The flags slime's train.py was exec'd with (its argv after the script)."""
        argv: list[str] = self.recorded()["argv"]
        return argv[1:]
