"""A pretrained Hugging Face student for `train sft`: full fine-tuning or LoRA (peft).

`load_base(config)` resolves `config.model` (a known name such as `smollm2-135m`, a GGUF file
or a Hugging Face directory; `trajforge.models.smollm`) and returns the model with its
`HFCodec`. With `config.lora_rank > 0` the model is wrapped in LoRA adapters on every
attention and MLP projection (rank `lora_rank`, scale `lora_alpha / lora_rank`), and only
they are trained.

A checkpoint's `model/` always holds plain, merged weights, so `serve`, `eval` and `train
rl` load a LoRA checkpoint like any other; the adapter itself is kept in `model/adapter/`
(peft's form) and `resume` continues training it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from trajforge.errors import UserError
from trajforge.models.smollm import resolve_model
from trajforge.serve.codec import HFCodec

ADAPTER_DIR = "adapter"
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _load_pretrained(spec: str) -> tuple[Any, HFCodec]:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()
    path = resolve_model(spec)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot load Hugging Face model '{spec}': {exc}") from None
    if not tokenizer.chat_template:
        raise UserError(f"model '{spec}': its tokenizer has no chat template")
    return model, HFCodec(tokenizer)


def _require_peft() -> None:
    try:
        import peft  # noqa: F401
    except ImportError:
        raise UserError("LoRA needs peft: pip install 'trajforge[train]'") from None


def load_base(config: Any) -> tuple[Any, HFCodec]:
    """The model to train and its codec (LoRA-wrapped when `config.lora_rank` > 0)."""
    model, codec = _load_pretrained(config.model)
    if not config.lora_rank:
        return model, codec
    _require_peft()
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_dropout=0.0,
        target_modules=LORA_TARGETS,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora), codec


def resume_lora(config: Any, model_dir: Path) -> tuple[Any, HFCodec]:
    """The base model with the checkpoint's adapter, trainable again."""
    _require_peft()
    from peft import PeftModel

    adapter = model_dir / ADAPTER_DIR
    if not adapter.is_dir():
        raise UserError(f"{model_dir.parent}: a LoRA checkpoint without {ADAPTER_DIR}/ to resume")
    model, codec = _load_pretrained(config.model)
    return PeftModel.from_pretrained(model, adapter, is_trainable=True), codec


def is_lora(model: Any) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def save_weights(model: Any, codec: Any, staging: Path) -> None:
    """Plain (merged) weights and the tokenizer in `staging`; a LoRA adapter beside them."""
    if is_lora(model):
        copy.deepcopy(model).merge_and_unload().save_pretrained(staging)
        model.save_pretrained(staging / ADAPTER_DIR)
    else:
        model.save_pretrained(staging)
    if isinstance(codec, HFCodec):
        codec.tokenizer.save_pretrained(staging)
