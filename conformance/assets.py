"""A tiny Llama and N peft LoRA adapters, generated locally and cached.

vLLM needs a real model directory even to build its scheduler config, and LoRA
serving real adapters; nothing is downloaded. Generated from fixed seeds; a
`.done` marker makes a half-written cache regenerate.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path(os.environ.get("LORA_SCHED_ASSETS", Path(__file__).resolve().parent.parent / ".assets"))
VOCAB_WORDS = 500  # plus special tokens
HIDDEN = 256
LAYERS = 2
HEADS = 4
MAX_POSITIONS = 2048
LORA_RANK = 8
VERSION = 1  # bump to regenerate caches built by an older layout


@dataclass(frozen=True)
class Assets:
    model: Path
    adapters: dict[str, Path]  # served name -> adapter directory

    def lora_modules(self) -> list[str]:
        return [f"{name}={path}" for name, path in self.adapters.items()]


def _words() -> list[str]:
    return [f"w{i}" for i in range(VOCAB_WORDS)]


def _write_tokenizer(model_dir: Path) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    vocab = {tok: i for i, tok in enumerate(specials + _words())}
    tok = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="<pad>")
    fast.model_max_length = MAX_POSITIONS
    fast.save_pretrained(model_dir)


def _write_model(model_dir: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB_WORDS + 4, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                      num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS,
                      max_position_embeddings=MAX_POSITIONS, bos_token_id=1, eos_token_id=2,
                      pad_token_id=3, tie_word_embeddings=False, torch_dtype="float32")
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(model_dir, safe_serialization=True)


def _write_adapter(model_dir: Path, out: Path, seed: int) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    base = LlamaForCausalLM.from_pretrained(model_dir)
    cfg = LoraConfig(r=LORA_RANK, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                     init_lora_weights=False, task_type="CAUSAL_LM")
    peft_model = get_peft_model(base, cfg)
    peft_model.save_pretrained(out)
    # vLLM resolves the base model from the adapter config; point it at ours.
    cfg_path = out / "adapter_config.json"
    data = json.loads(cfg_path.read_text())
    data["base_model_name_or_path"] = str(model_dir)
    cfg_path.write_text(json.dumps(data, indent=2))


def _generate(dest: Path, write) -> None:
    """Write `dest` into a private directory renamed into place: processes that
    generate it at once never see half of it; the first rename wins."""
    if (dest / ".done").exists():
        return
    tmp = dest.parent / f".{dest.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write(tmp)
    (tmp / ".done").write_text("ok\n")
    if dest.exists() and not (dest / ".done").exists():  # left half-written by a killed process
        shutil.rmtree(dest, ignore_errors=True)
    try:
        os.rename(tmp, dest)
    except OSError:  # another process's copy is in place
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_assets(n_adapters: int = 8, root: str | os.PathLike[str] | None = None) -> Assets:
    """Return the tiny model and `n_adapters` adapters, generating what is missing."""
    root = Path(root) if root is not None else DEFAULT_ROOT
    model_dir = root / f"tiny-llama-v{VERSION}"
    _generate(model_dir, lambda d: (_write_tokenizer(d), _write_model(d)))
    adapters: dict[str, Path] = {}
    for i in range(1, n_adapters + 1):
        out = root / f"lora-v{VERSION}-{i}"
        _generate(out, lambda d, seed=1000 + i: _write_adapter(model_dir, d, seed=seed))
        adapters[f"lora{i}"] = out
    return Assets(model_dir, adapters)


if __name__ == "__main__":
    a = ensure_assets()
    print(a.model)
    for name, path in a.adapters.items():
        print(name, path)
