"""A checkpoint folder's tokenizer and the special-token strings its config files declare.

Two layouts exist among the supported families: a `tokenizer.json` (LLaDA, Open-dCoder,
DiffuCoder) read with `tokenizers`, or Qwen2 BPE files `vocab.json` + `merges.txt` with a
custom tokenizer class named in `tokenizer_config.json` (Dream, DreamOn). That custom class
is code in the folder and is never run: transformers' own Qwen2 tokenizer reads the same
files (and the added tokens of `tokenizer_config.json`) and hands back a `tokenizers.Tokenizer`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import Tokenizer

from dllm_lsp.model_folder import ModelLoadError, check_text_file_size, load_json_file

ROLES = ("mask_token", "pad_token", "eos_token", "bos_token")


@dataclass
class TokenizerFiles:
    tokenizer: Tokenizer
    special: dict[str, str] = field(default_factory=dict)   # role (mask_token, ...) -> token text
    add_bos: bool = False                                     # tokenizer_config.json add_bos_token

    def id_of(self, role: str) -> int | None:
        text = self.special.get(role)
        return self.tokenizer.token_to_id(text) if text else None

    def token_id(self, text: str) -> int | None:
        return self.tokenizer.token_to_id(text)


def load_tokenizer(folder: Path) -> TokenizerFiles:
    config = _read_optional_json(folder / "tokenizer_config.json")
    special_map = _read_optional_json(folder / "special_tokens_map.json")
    if (folder / "tokenizer.json").is_file():
        tokenizer = read_tokenizer_json(folder / "tokenizer.json")
    elif (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
        check_text_file_size(folder / "vocab.json")
        check_text_file_size(folder / "merges.txt")
        tokenizer = _qwen2_bpe(folder)
    else:
        raise ModelLoadError(f"{folder} has no tokenizer: expected tokenizer.json, or vocab.json with merges.txt")
    special: dict[str, str] = {}
    for source in (special_map, config):   # tokenizer_config.json wins where both say something
        for role in ROLES:
            text = _token_text(source.get(role))
            if text:
                special[role] = text
    return TokenizerFiles(tokenizer, special, bool(config.get("add_bos_token", False)))


def read_tokenizer_json(path: Path) -> Tokenizer:
    """A `tokenizer.json`, or ModelLoadError naming it (too large to be one, or malformed)."""
    check_text_file_size(path)
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the tokenizers library raises a bare Exception for malformed files
        raise ModelLoadError(f"{path} is not a valid tokenizer file: {exc}") from exc


def highest_text_id(tokenizer: Tokenizer) -> int:
    """The highest id the tokenizer can give a user's text: its vocabulary's and its non-special
    added tokens' (special ones are encoded as plain text, `plain_text_tokenizer`)."""
    ids = list(tokenizer.get_vocab(with_added_tokens=False).values())
    ids += [i for i, token in tokenizer.get_added_tokens_decoder().items() if not token.special]
    return max(ids, default=-1)


def check_vocabulary(tokenizer: Tokenizer, rows: int) -> None:
    """ModelLoadError when the tokenizer can give text an id the embedding has no row for: such a
    folder loaded, and then a completion whose text held one of those tokens failed with
    IndexError (with a bigger vocabulary: every completion)."""
    top = highest_text_id(tokenizer)
    if top >= rows:
        raise ModelLoadError(f"the tokenizer has token ids up to {top}, but the model's embedding has {rows} rows: "
                             "the folder's tokenizer and weights do not belong together")


def _qwen2_bpe(folder: Path) -> Tokenizer:
    from transformers import Qwen2Tokenizer  # noqa: PLC0415  (slow import, only for this layout)

    try:
        wrapper = Qwen2Tokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:
        raise ModelLoadError(f"could not read the BPE tokenizer (vocab.json, merges.txt) in {folder}: {exc}") from exc
    return wrapper.backend_tokenizer


def _token_text(value) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _read_optional_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    data = load_json_file(path)
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path} must hold a JSON object")
    return data
