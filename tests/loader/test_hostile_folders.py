"""Hostile and broken model folders, as a user might hand the loader: each is refused at load with
one line that names the file and the problem, before anything large is allocated, and never
loads to fail later at completion time (docs/models.md, "What happens at load time").

The cases a probe found broken come first (each says what it did before); a short table of
corrupt weight files that were already refused follows."""
from __future__ import annotations

import json
import shutil
import struct

import pytest

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from dllm_lsp.arch.tiny import sample_corpus
from dllm_lsp.arch.tokenizer import SPECIAL_TOKENS
from dllm_lsp.checkpoints.block_tiny import write_tiny_block_checkpoint
from dllm_lsp.checkpoints.tiny import tiny_tokenizer, write_tiny_checkpoint
from dllm_lsp.loader import ModelLoadError, load_model
from dllm_lsp.model_folder import MAX_TEXT_FILE_BYTES

pytestmark = pytest.mark.timeout(120)

BLOCK_LAYOUTS = ("sdar", "sdar-moe", "fast-dllm-v2", "llada2")


@pytest.fixture(scope="module")
def originals(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("hostile-originals")
    found = {"embedded": tiny_model_dir, "open-dcoder": write_tiny_checkpoint(root / "open-dcoder", "open-dcoder")}
    for layout in BLOCK_LAYOUTS:
        found[layout] = write_tiny_block_checkpoint(root / layout, layout)
    return found


@pytest.fixture
def damaged(originals, tmp_path):
    """A private copy of a tiny folder, for a test to break."""
    def copy(layout: str):
        return shutil.copytree(originals[layout], tmp_path / layout)
    return copy


def edit_json(path, **changes):
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(changes)
    path.write_text(json.dumps(data))   # NaN is written as JSON's NaN, which json.loads reads back


def refused(folder, *fragments) -> str:
    with pytest.raises(ModelLoadError) as info:
        load_model(str(folder), "cpu")
    message = str(info.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def first_shard(folder):
    single = folder / "model.safetensors"
    return single if single.exists() else sorted(folder.glob("model-0000*.safetensors"))[0]


def rewrite_header(path, change) -> None:
    """Apply `change` to a safetensors file's parsed header and write it back with its data."""
    raw = path.read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + size])
    change(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + size:])


def tensors(header) -> list[dict]:
    return [entry for name, entry in header.items() if name != "__metadata__"]


# -- config.json values of the block families, read with int() / float() before ----------------------

@pytest.mark.parametrize("layout, changes, fragment", [
    ("sdar", {"block_size": 1.5}, "config.json 'block_size' must be an integer, not 1.5"),           # was a block of 1
    ("sdar", {"block_size": "64"}, "config.json 'block_size' must be an integer, not '64'"),        # was 64
    ("sdar", {"block_size": 0}, "block size 0 must be within 1..32768"),                            # was the default, 4
    ("fast-dllm-v2", {"bd_size": True}, "config.json 'bd_size' must be an integer, not True"),      # was 1
    ("fast-dllm-v2", {"small_block_size": -1}, "sub-block size -1 must be within 1.."),             # was silently whole blocks
    ("fast-dllm-v2", {"small_block_size": 2.5}, "'small_block_size' must be an integer, not 2.5"),  # was 2
    ("llada2", {"routed_scaling_factor": float("nan")}, "'routed_scaling_factor' must be a positive number, not nan"),
    ("llada2", {"routed_scaling_factor": -1}, "'routed_scaling_factor' must be a positive number"),  # loaded
    ("llada2", {"partial_rotary_factor": float("nan")}, "'partial_rotary_factor' must be a number in (0, 1]"),
    ("llada2", {"n_group": "4"}, "config.json 'n_group' must be an integer, not '4'"),
    ("llada2", {"topk_group": 1.5}, "config.json 'topk_group' must be an integer, not 1.5"),         # loaded as 1
    ("llada2", {"first_k_dense_replace": True}, "'first_k_dense_replace' must be an integer, not True"),
    ("llada2", {"num_shared_experts": 1.5}, "'num_shared_experts' must be an integer, not 1.5"),     # loaded as 1
    ("sdar-moe", {"mlp_only_layers": ["0"]}, "'mlp_only_layers' must be a list of layer numbers"),
    ("sdar-moe", {"decoder_sparse_step": "2"}, "'decoder_sparse_step' must be an integer, not '2'"),
    ("sdar", {"intermediate_size": 0}, "'intermediate_size' is 0"),                                  # said "lacks"
])
def test_a_block_family_value_of_the_wrong_kind_is_refused(damaged, layout, changes, fragment):
    folder = damaged(layout)
    edit_json(folder / "config.json", **changes)
    refused(folder, fragment)


def test_a_block_size_in_generation_config_is_read_as_strictly(damaged):
    folder = damaged("sdar")
    config = json.loads((folder / "config.json").read_text())
    del config["block_size"]
    (folder / "config.json").write_text(json.dumps(config))
    edit_json(folder / "generation_config.json", block_length="8")
    refused(folder, "generation_config.json 'block_length' must be an integer, not '8'")


def test_block_family_values_left_out_or_zero_where_zero_means_none_still_load(damaged):
    """What the strict reads accept: absent keys take the family's defaults, and a count of shared
    experts may be 0 (the tiny folder's shared-expert tensors are then extra, never read)."""
    folder = damaged("llada2")
    config = json.loads((folder / "config.json").read_text())
    for key in ("routed_scaling_factor", "partial_rotary_factor"):   # the tiny folder has the defaults
        del config[key]
    config["num_shared_experts"] = 0
    (folder / "config.json").write_text(json.dumps(config))
    assert load_model(str(folder), "cpu").family == "llada2"


# -- the embedded model's config.json: sizes bounded before the model is built ------------------------

@pytest.mark.parametrize("key, value, fragment", [
    ("n_layers", 10**9, "config.json is invalid: n_layers is 1000000000: it must be within 1..1024"),   # hung building them
    ("dim", 10**9, "config.json is invalid: dim is 1000000000: it must be within 1..4194304"),          # 4 GB, 30 s first
    ("max_positions", 10**9, "config.json is invalid: max_positions is 1000000000"),                     # loaded
    ("vocab_size", 10**9, "config.json is invalid: vocab_size is 1000000000"),
])
def test_an_embedded_config_size_is_bounded_before_anything_is_built(damaged, key, value, fragment):
    folder = damaged("embedded")
    edit_json(folder / "config.json", **{key: value})
    refused(folder, fragment)


# -- files too large to be a model's JSON ----------------------------------------------------------

@pytest.mark.parametrize("layout, name", [("embedded", "config.json"), ("sdar", "generation_config.json"),
                                          ("sdar", "tokenizer.json"), ("open-dcoder", "model.safetensors.index.json")])
def test_a_json_file_too_large_to_be_a_models_is_refused_unread(damaged, layout, name):
    """A 3 GB config.json (a sparse file of nothing) took 6.3 GB of memory and a minute to be
    called "not valid JSON"; a 200 MB generation_config.json loaded."""
    folder = damaged(layout)
    path = folder / name
    path.write_text("{}")
    with path.open("r+b") as fh:
        fh.truncate(MAX_TEXT_FILE_BYTES + 1)   # sparse: no disk, no time
    refused(folder, str(path), "too large for a model's JSON or tokenizer file")


# -- a tokenizer whose ids the embedding has no row for --------------------------------------------

def bigger_tokenizer(folder, rows: int, specials: list[str]) -> Tokenizer:
    """A tokenizer of three times `rows` tokens, `specials` first (ids 0..): every special id is
    inside the embedding, many ordinary text tokens are not."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(sample_corpus(), trainer=trainers.BpeTrainer(
        vocab_size=rows * 3, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tokenizer.save(str(folder / "tokenizer.json"))
    assert max(tokenizer.encode("def load_model(folder):\n    return folder\n").ids) >= rows   # the IndexError
    return tokenizer


def test_an_embedded_tokenizer_bigger_than_the_embedding_is_refused(damaged):
    """It loaded, and a completion whose text held a token past the embedding failed with IndexError."""
    folder = damaged("embedded")
    rows = json.loads((folder / "config.json").read_text())["vocab_size"]
    bigger_tokenizer(folder, rows, SPECIAL_TOKENS)   # mask, pad, eos keep ids 0, 1, 2
    refused(folder, "the tokenizer has token ids up to", f"embedding has {rows} rows")


@pytest.mark.parametrize("layout", ["sdar", "open-dcoder"])
def test_a_checkpoint_tokenizer_bigger_than_the_embedding_is_refused(damaged, layout):
    """It loaded; every completion then failed with IndexError (a traceback in the CLI, an internal
    error for each request of the server)."""
    folder = damaged(layout)
    config = json.loads((folder / "config.json").read_text())
    added = json.loads((folder / "tokenizer.json").read_text())["added_tokens"]
    bigger_tokenizer(folder, config["vocab_size"], [t["content"] for t in added])
    for path in (folder / "config.json", folder / "generation_config.json"):
        if path.exists():   # the special ids are the tokenizer's declared tokens' again (now 0..)
            data = json.loads(path.read_text())
            for key in ("mask_token_id", "eos_token_id", "pad_token_id", "bos_token_id"):
                data.pop(key, None)
            path.write_text(json.dumps(data))
    refused(folder, "the tokenizer has token ids up to", f"embedding has {config['vocab_size']} rows")


def test_fill_in_the_middle_tokens_past_the_embedding_are_refused(damaged):
    """A block family's prompt starts with them: every completion failed with IndexError."""
    folder = damaged("sdar")
    fillers = [f"<|unused_{i}|>" for i in range(100)]
    tokenizer = tiny_tokenizer(["<|endoftext|>", "<|MASK|>", *fillers, "<|fim_prefix|>", "<|fim_middle|>",
                                "<|fim_suffix|>"])
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").unlink()
    refused(folder, "fill-in-the-middle tokens", "outside the 384-row embedding")


# -- weights that are not floating point --------------------------------------------------------------

INTEGER_OF_SAME_WIDTH = {"F32": "I32", "BF16": "I16", "F16": "I16"}


@pytest.mark.parametrize("layout, fragment", [
    ("embedded", "is stored as int32, not as bfloat16, float16, float32 or int8 with scales"),
    ("open-dcoder", "is stored as I32, not as floating point"),
    ("sdar", "quantized checkpoints are not supported"),
])
def test_integer_weights_are_refused(damaged, layout, fragment):
    """Read as integers and cast to float, they loaded a model of junk with no error."""
    folder = damaged(layout)

    def to_integer(header):
        entry = next(e for e in tensors(header) if len(e["shape"]) == 2 and e["dtype"] in INTEGER_OF_SAME_WIDTH)
        entry["dtype"] = INTEGER_OF_SAME_WIDTH[entry["dtype"]]

    rewrite_header(first_shard(folder), to_integer)
    refused(folder, fragment)


# -- files named as they should be, but not what they should be --------------------------------------

def test_a_shard_that_is_not_a_regular_file_is_called_so(damaged):
    """It was called missing: the user looked for a file that was there."""
    folder = damaged("sdar")
    shard = first_shard(folder)
    shard.unlink()
    shard.mkdir()
    refused(folder, f"shard {shard.name}", "is not a regular file")


def test_embedded_weights_that_are_no_safetensors_name_the_file(damaged):
    folder = damaged("embedded")
    (folder / "model.safetensors").write_bytes(b"\x01\x02\x03")
    refused(folder, "model.safetensors is not a readable safetensors file", "header too small")


def test_an_embedded_tokenizer_that_is_no_tokenizer_names_the_file(damaged):
    """It said "Exception: Model missing", naming no file."""
    folder = damaged("embedded")
    (folder / "tokenizer.json").write_text("{}")
    refused(folder, str(folder / "tokenizer.json"), "is not a valid tokenizer file")


# -- corrupt weight files that were already refused ----------------------------------------------------

def _header_length_past_the_file(path):
    raw = path.read_bytes()
    path.write_bytes(struct.pack("<Q", len(raw) * 4) + raw[8:])


def _offsets_outside_the_file(path):
    def change(header):
        entry = tensors(header)[-1]
        length = entry["data_offsets"][1] - entry["data_offsets"][0]
        entry["data_offsets"] = [10**9, 10**9 + length]
    rewrite_header(path, change)


def _overlapping_offsets(path):
    def change(header):
        a, b = tensors(header)[:2]
        b["data_offsets"] = [a["data_offsets"][0], a["data_offsets"][0] + b["data_offsets"][1] - b["data_offsets"][0]]
    rewrite_header(path, change)


def _a_shape_its_bytes_do_not_cover(path):
    def change(header):
        next(e for e in tensors(header) if len(e["shape"]) == 2)["shape"][0] = 10**9
    rewrite_header(path, change)


@pytest.mark.parametrize("layout", ["embedded", "sdar"])
@pytest.mark.parametrize("damage, fragment", [
    (lambda p: p.write_bytes(b""), "header too small"),
    (lambda p: p.write_bytes(p.read_bytes()[:-100]), "file not fully covered"),
    (_header_length_past_the_file, "invalid header length"),
    (_offsets_outside_the_file, "invalid offset"),
    (_overlapping_offsets, "invalid offset"),
    (_a_shape_its_bytes_do_not_cover, "invalid shape, data type, or offset"),
], ids=["empty", "truncated", "header-length", "offsets-outside", "offsets-overlap", "huge-shape"])
def test_a_corrupt_weight_file_is_refused_naming_it(damaged, layout, damage, fragment):
    folder = damaged(layout)
    shard = first_shard(folder)
    damage(shard)
    refused(folder, shard.name, "is not a readable safetensors file", fragment)


@pytest.mark.parametrize("shard", ["../../etc/passwd", "/etc/passwd", "..", ""])   # the last two: were "missing"
def test_an_index_naming_a_file_outside_the_folder_is_refused(damaged, shard):
    folder = damaged("sdar")
    index = folder / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"][next(iter(data["weight_map"]))] = shard
    index.write_text(json.dumps(data))
    refused(folder, "names an invalid shard file", shard)
