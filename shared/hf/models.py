"""Local models: load a Hugging Face-format directory, or build a random-weight one.

Nothing is downloaded: a model is a local directory (`HF_HUB_OFFLINE` is set before
transformers loads). `init_model` builds a Llama-architecture model with random weights and a
real byte-level BPE tokenizer trained on the shipped MATH-500 text, for tests, demos and GPU
timing: `spex model init --layers 2 --hidden 64 --out DIR` (add `--prm` for a process reward
model: the same body with a two-label token-classification head; `--prm-kind` another family's,
`spex.shared.hf.prm_models`).

`--shape NAME` writes one of the simulator catalog's models instead (`SHAPES`: its layers,
heads, widths and vocabulary; `roofline.hardware.MODELS` holds its bytes and parameters) as a
config and a tokenizer only: no weights are written. `load_lm` builds such a model's random
weights where it runs — on the GPU, in bfloat16, in seconds — from the seed in its config
(`RANDOM_WEIGHTS`), so a 7B model costs no download, no disk and nothing carried.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import (  # noqa: E402
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from spex.shared.content.reward_prompts import PrmKind  # noqa: E402
from spex.shared.hf.importing import model_dir_problem, prm_family_problem  # noqa: E402
from spex.shared.hf.prm_models import ModelClass, build_prm, moved, prm_class  # noqa: E402
from spex.shared.hf.shapes import RANDOM_WEIGHTS, Shape  # noqa: E402

__all__ = [
    "ModelSpec",
    "eos_ids",
    "init_model",
    "load_lm",
    "load_prm",
    "load_tokenizer",
]

transformers.utils.logging.disable_progress_bar()  # a service's log is JSON lines, not bars
transformers.utils.logging.set_verbosity_error()

# A plain chat template, so prompts go through `apply_chat_template` as with released models.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
# The dtypes a model is built, loaded or cast in, by name.
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ModelSpec:
    layers: int = 2
    hidden: int = 64
    vocab: int = 4096
    heads: int = 0  # 0: hidden / 32, at least 1
    intermediate: int = 0  # 0: 2 × hidden
    dtype: str = "float32"
    seed: int = 0
    prm: bool = False  # a process reward model (of `prm_kind`) instead of a causal LM
    prm_kind: PrmKind = "token-classification"
    shape: Shape | None = None  # a catalog model's dimensions (config and tokenizer only: weights at load)

    def validate(self) -> None:
        for name, value in (("layers", self.layers), ("hidden", self.hidden), ("vocab", self.vocab)):
            if value < 1:
                raise ValueError(f"--{name}: must be at least 1, not {value}")
        heads = self.head_count
        if self.hidden % heads or (self.hidden // heads) % 2:
            raise ValueError(f"--hidden: {self.hidden} does not split into {heads} heads of even size")
        if self.dtype not in TORCH_DTYPES:
            raise ValueError(f"--dtype: float32, bfloat16 or float16, not {self.dtype!r}")

    @property
    def head_count(self) -> int:
        return self.heads or max(1, self.hidden // 32)


def train_tokenizer(vocab: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on the shipped MATH-500 problems and solutions (offline)."""
    import json
    from importlib import resources

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = []
    with resources.files("spex.data").joinpath("math500.jsonl").open() as f:
        for line in f:
            row = json.loads(line)
            texts += [row["problem"], row["solution"]]
    tok = Tokenizer(models.BPE(unk_token=SPECIAL["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(SPECIAL.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def init_model(spec: ModelSpec, out: str | Path, tokenizer: PreTrainedTokenizerBase | None = None) -> Path:
    """Build a random-weight Llama-architecture model (and its tokenizer) into `out`; with a
    `shape`, its config and tokenizer only (the weights are built by `load_lm`). `tokenizer`:
    one `train_tokenizer` made already (a model and its reward model share it), else trained."""
    spec.validate()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = tokenizer if tokenizer is not None else train_tokenizer(spec.vocab)
    if spec.shape is not None:
        config = spec.shape.config(tokenizer)
        setattr(config, RANDOM_WEIGHTS, spec.seed)
        if spec.prm:  # the same body with the reward model's two-label head
            config.num_labels = 2
            config.architectures = [f"{type(config).__name__.removesuffix('Config')}ForTokenClassification"]
        config.save_pretrained(out)
        tokenizer.save_pretrained(out)
        return out
    heads = spec.head_count
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden,
        intermediate_size=spec.intermediate or 2 * spec.hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    config.num_labels = 2  # the reward model's labels: wrong, right
    torch.manual_seed(spec.seed)
    if spec.prm:  # its family's step tag joins a copy of the tokenizer (a shared one stays as it is)
        tokenizer = copy.deepcopy(tokenizer)
        model = build_prm(spec.prm_kind, config, tokenizer, TORCH_DTYPES[spec.dtype])
    else:
        model = moved(LlamaForCausalLM(config), TORCH_DTYPES[spec.dtype])
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def load_lm(path: str | Path, device: str = "cpu", dtype: str | None = None) -> PreTrainedModel:
    """The causal LM in `path`, in `dtype` (float32, bfloat16, float16; None: as saved, and
    bfloat16 on a GPU). A model written by `spex model init --shape` gets its random weights
    here, built on `device`."""
    return _load(path, device, dtype, AutoModelForCausalLM)


def load_prm(
    path: str | Path, device: str = "cpu", dtype: str | None = None, kind: PrmKind = "token-classification"
) -> PreTrainedModel:
    """The reward model of family `kind` in `path`, as `load_lm` loads a causal LM; one written by
    `init_model` with a shape gets its random weights here, built on `device`. A directory whose
    architecture is another family's is refused, naming the family."""
    _check(path)
    problem = prm_family_problem(str(path), kind)
    if problem is not None:
        raise ValueError(f"prm_kind: {problem}")
    return _load(path, device, dtype, prm_class(kind))


def _load(path: str | Path, device: str, dtype: str | None, auto: ModelClass) -> PreTrainedModel:
    """The model of `auto`'s class in `path` (random weights where its config asks for them)."""
    _check(path)
    if dtype is not None and dtype not in TORCH_DTYPES:
        raise ValueError(f"dtype: float32, bfloat16 or float16, not {dtype!r}")
    if dtype is None and torch.device(device).type == "cuda":
        dtype = "bfloat16"
    config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    seed = getattr(config, RANDOM_WEIGHTS, None)
    if seed is not None and not _has_weights(Path(path)):
        kind = TORCH_DTYPES[dtype or "float32"]
        _check_room(config, kind, torch.device(device), auto)
        torch.manual_seed(int(seed))
        with torch.device(device):
            built = auto.from_config(config, dtype=kind)
        return built.eval()
    model = auto.from_pretrained(str(path), local_files_only=True)
    if dtype is not None:
        model = moved(model, TORCH_DTYPES[dtype])
    return moved(model, device).eval()


def _check_room(config: PretrainedConfig, dtype: torch.dtype, device: torch.device, auto: ModelClass) -> None:
    """A catalog-sized model refused up front where its weights cannot fit (a 7B model in
    float32 on a laptop), rather than the process killed for memory halfway through."""
    with torch.device("meta"):
        params = sum(p.numel() for p in auto.from_config(config).parameters())
    need = params * torch.tensor([], dtype=dtype).element_size()
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:
        meminfo = Path("/proc/meminfo")
        lines = meminfo.read_text().splitlines() if meminfo.exists() else []
        free = next((int(line.split()[1]) * 1024 for line in lines if line.startswith("MemAvailable:")), need)
    if need > free:
        raise ValueError(
            f"model: its random weights take {need / 1e9:.1f} GB in {str(dtype).removeprefix('torch.')}, "
            f"and {device} has {free / 1e9:.1f} GB free (a catalog shape is for a GPU: --device cuda)"
        )


def _has_weights(path: Path) -> bool:
    return any(path.glob("*.safetensors")) or any(path.glob("*.bin"))


def _check(path: str | Path) -> None:
    problem = model_dir_problem(str(path))
    if problem is not None:
        raise ValueError(f"model: {problem}")


def eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """Every token that ends the model's output: the tokenizer's EOS and the generation
    config's (chat models end a turn with their own, e.g. `<|eot_id|>`, `<|im_end|>`)."""
    ids: set[int] = set()
    for source in (
        tokenizer.eos_token_id,
        # transformers sets `generation_config` only on a model that can generate
        getattr(getattr(model, "generation_config", None), "eos_token_id", None),
    ):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, list | tuple):
            ids.update(i for i in source if isinstance(i, int))
    return frozenset(ids)
