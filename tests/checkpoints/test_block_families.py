"""The block-diffusion and newer coder families (issue 15), each from a tiny folder in its real layout.

(a) logits against transformers' own modules on the same weights, with the family's attention
    mask passed as a 4D mask: Qwen3 (SDAR, CoDA), Qwen3-MoE (SDAR-MoE, LLaDA-MoE), Llama
    (Stable-DiffCoder), Qwen2 (Fast-dLLM v2) and GLM-4.5-MoE (LLaDA2.0: the same partial RoPE,
    per-head q/k norm, sigmoid group-limited router with a choice bias, shared experts and
    scaling; only the tensor names differ);
(b) block-wise decoding over the exact cache gives the same tokens as recomputing every block
    from scratch;
(c) infill round trips: engine, `dllm-lsp infill` / `complete`, the server;
(d) broken folders are named clearly.
"""
from __future__ import annotations

import io
import json
import re
import shutil
import sys

import pytest
import torch
from lsprotocol import types
from safetensors.torch import load_file

from dllm_lsp.checkpoints.block_denoiser import BlockDenoiser, random_block_denoiser
from dllm_lsp.checkpoints.block_families import block_config, detect_block_family
from dllm_lsp.checkpoints.block_model import BlockConfig, MoEConfig, block_causal_mask, random_block_model
from dllm_lsp.checkpoints.block_tiny import BLOCK_LAYOUTS, EXECUTED_MARKER, FAMILY_OF, write_tiny_block_checkpoint
from dllm_lsp.engine.blockwise import decode_blockwise
from dllm_lsp.engine.denoiser import BlockDiffusionPort, Canvas
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.span_starts import TokenIndex
from dllm_lsp.engine.types import DecodeSettings, InfillRequest, Slot
from dllm_lsp.model_folder import ModelLoadError

from server.lsp_harness import inline_params, open_doc, start_server, stop_server, wait_loaded

TOL = 1e-4
BLOCK = [layout for layout in BLOCK_LAYOUTS if FAMILY_OF[layout].attention == "block"]
PREFIX = "def area(width, height):\n    return "
SUFFIX = "\n\n\nprint(area(2, 3))\n"


@pytest.fixture(scope="module")
def block_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("block-checkpoints")
    return {layout: write_tiny_block_checkpoint(root / layout, layout, seed=10 + i)
            for i, layout in enumerate(BLOCK_LAYOUTS)}


@pytest.fixture(scope="module")
def block_loaded(block_folders):
    from dllm_lsp.loader import load_model

    return {layout: load_model(str(folder), "cpu") for layout, folder in block_folders.items()}


# -- (a) logits against transformers ------------------------------------------------------------

def _tensors(folder) -> dict[str, torch.Tensor]:
    out = {}
    for shard in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(shard)))
    return out


def _fuse_experts(tensors: dict, n_layers: int, n_experts: int, router_bias_name: str | None = None) -> dict:
    """Per-expert checkpoint tensors -> transformers 5's fused expert parameters."""
    out = dict(tensors)
    for i in range(n_layers):
        mlp = f"model.layers.{i}.mlp."
        if mlp + "experts.0.gate_proj.weight" not in tensors:
            continue
        gate_up, down = [], []
        for e in range(n_experts):
            gate_up.append(torch.cat([out.pop(f"{mlp}experts.{e}.gate_proj.weight"),
                                      out.pop(f"{mlp}experts.{e}.up_proj.weight")]))
            down.append(out.pop(f"{mlp}experts.{e}.down_proj.weight"))
        out[mlp + "experts.gate_up_proj"] = torch.stack(gate_up)
        out[mlp + "experts.down_proj"] = torch.stack(down)
        if router_bias_name is not None:
            out[mlp + "gate.e_score_correction_bias"] = out.pop(mlp + router_bias_name)
    return out


def reference_model(layout: str, folder):
    import transformers

    c = json.loads((folder / "config.json").read_text())
    tensors = _tensors(folder)
    common = dict(hidden_size=c["hidden_size"], num_attention_heads=c["num_attention_heads"],
                  num_key_value_heads=c["num_key_value_heads"], num_hidden_layers=c["num_hidden_layers"],
                  vocab_size=c["vocab_size"], rms_norm_eps=c["rms_norm_eps"], head_dim=c["head_dim"],
                  max_position_embeddings=c["max_position_embeddings"], tie_word_embeddings=False,
                  rope_parameters={"rope_type": "default", "rope_theta": c["rope_theta"]})
    if layout in ("sdar", "coda"):
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(intermediate_size=c["intermediate_size"],
                                                                       attention_bias=False, **common))
    elif layout == "stable-diffcoder":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(intermediate_size=c["intermediate_size"],
                                                                       attention_bias=False, mlp_bias=False, **common))
    elif layout == "fast-dllm-v2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(intermediate_size=c["intermediate_size"],
                                                                       **{k: v for k, v in common.items()
                                                                          if k != "head_dim"}))
    elif layout in ("sdar-moe", "llada-moe"):
        ffn = c.get("moe_intermediate_size") or c["expert_intermediate_size"]
        cfg = transformers.Qwen3MoeConfig(intermediate_size=c.get("intermediate_size", 4 * c["hidden_size"]),
                                          moe_intermediate_size=ffn, num_experts=c["num_experts"],
                                          num_experts_per_tok=c["num_experts_per_tok"],
                                          norm_topk_prob=c["norm_topk_prob"], decoder_sparse_step=1,
                                          mlp_only_layers=c.get("mlp_only_layers", []), attention_bias=False, **common)
        model = transformers.Qwen3MoeForCausalLM(cfg)
        tensors = _fuse_experts(tensors, c["num_hidden_layers"], c["num_experts"])
    else:   # llada2 -> GLM-4.5-MoE's modules
        head_dim = c["head_dim"]
        cfg = transformers.Glm4MoeConfig(
            intermediate_size=c["intermediate_size"], moe_intermediate_size=c["moe_intermediate_size"],
            n_routed_experts=c["num_experts"], num_experts_per_tok=c["num_experts_per_tok"],
            n_shared_experts=c["num_shared_experts"], n_group=c["n_group"], topk_group=c["topk_group"],
            routed_scaling_factor=c["routed_scaling_factor"], first_k_dense_replace=c["first_k_dense_replace"],
            norm_topk_prob=True, use_qk_norm=True, attention_bias=False, partial_rotary_factor=0.5,
            **{**common, "rope_parameters": {"rope_type": "default", "rope_theta": c["rope_theta"],
                                             "partial_rotary_factor": 0.5}})
        model = transformers.Glm4MoeForCausalLM(cfg)
        q_rows, kv_rows = c["num_attention_heads"] * head_dim, c["num_key_value_heads"] * head_dim
        renamed = {}
        for name, tensor in tensors.items():
            name = name.replace("model.word_embeddings.", "model.embed_tokens.")
            if name.endswith("attention.query_key_value.weight"):
                base = name.replace("attention.query_key_value.weight", "self_attn.")
                q, k, v = tensor.split([q_rows, kv_rows, kv_rows])
                renamed.update({base + "q_proj.weight": q, base + "k_proj.weight": k, base + "v_proj.weight": v})
                continue
            name = (name.replace("attention.dense.", "self_attn.o_proj.")
                    .replace("attention.query_layernorm.", "self_attn.q_norm.")
                    .replace("attention.key_layernorm.", "self_attn.k_norm."))
            renamed[name] = tensor
        tensors = _fuse_experts(renamed, c["num_hidden_layers"], c["num_experts"], "gate.expert_bias")
    model.config._attn_implementation = "eager"
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    assert not unexpected, unexpected
    assert not [m for m in missing if "mtp" not in m], missing
    return model.eval()


def additive(allowed: torch.Tensor, batch: int) -> torch.Tensor:
    """bool [T, T] -> the 4D additive mask transformers takes as it is."""
    mask = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    return mask[None, None].expand(batch, 1, *allowed.shape)


def family_mask(layout: str, t: int, block: int) -> torch.Tensor:
    pos = torch.arange(t)
    if FAMILY_OF[layout].attention == "block":
        return block_causal_mask(pos, pos, block)
    return torch.ones(t, t, dtype=torch.bool)


@pytest.mark.parametrize("layout", BLOCK_LAYOUTS)
def test_block_family_logits_match_transformers(layout, block_folders, block_loaded):
    denoiser = block_loaded[layout]
    model = denoiser.model
    reference = reference_model(layout, block_folders[layout])
    torch.manual_seed(3)
    ids = torch.randint(0, denoiser.vocab_limit, (2, 23))
    allowed = family_mask(layout, 23, getattr(denoiser, "block_size", 4))
    hidden, _ = model(ids, torch.arange(23), None, allowed)
    ours = model.head(hidden)
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=additive(allowed, 2)).logits
    assert ours.shape == theirs.shape
    assert (ours - theirs).abs().max().item() < TOL
    if FAMILY_OF[layout].attention == "bidirectional":    # the dual-cache path runs the same stack
        assert (model.head(model.full(ids)[0]) - theirs).abs().max().item() < TOL


@pytest.mark.parametrize("layout", ["sdar", "llada2"])
def test_block_reference_comparison_can_fail(layout, block_folders, block_loaded):
    """With a plain causal mask the reference disagrees: the block mask is what is being compared."""
    model = block_loaded[layout].model
    reference = reference_model(layout, block_folders[layout])
    ids = torch.randint(0, block_loaded[layout].vocab_limit, (1, 16))
    ours = model.head(model(ids, torch.arange(16), None, block_causal_mask(torch.arange(16), torch.arange(16), 4))[0])
    with torch.no_grad():
        causal = reference(input_ids=ids).logits
    assert (ours - causal).abs().max().item() > 1e-2


def test_block_moe_routes_to_several_experts(block_loaded):
    """The tiny routers really spread tokens (so the MoE comparison above exercises routing)."""
    for layout in ("sdar-moe", "llada2", "llada-moe"):
        mlp = block_loaded[layout].model.layers[1].mlp
        index, weight = mlp.route(torch.randn(64, mlp.router.shape[1]))
        assert index.unique().numel() >= 4, layout
        assert torch.isfinite(weight).all()


# -- (b) cached block-wise decoding equals uncached ---------------------------------------------

class UncachedPort:
    """The same model port, but every block recomputes the whole sequence under the block mask."""

    def __init__(self, port: BlockDenoiser) -> None:
        self.port = port
        self.block_size, self.sub_block_size = port.block_size, port.sub_block_size
        self.special, self.device = port.special, port.device

    def context_ids(self, prefix, suffix):
        return self.port.context_ids(prefix, suffix)

    def new_cache(self, batch):
        return {"ids": torch.empty(batch, 0, dtype=torch.long)}

    def prefill(self, cache, ids, start):
        assert start == cache["ids"].shape[1]
        cache["ids"] = torch.cat([cache["ids"], ids], 1)

    def block_logits(self, cache, ids, start, rows=None):
        assert start == cache["ids"].shape[1]
        bs = self.block_size
        cache["ids"] = torch.cat([cache["ids"], ids[:, :-bs]], 1)     # finished blocks join the "cache"
        start = cache["ids"].shape[1]
        seq = torch.cat([cache["ids"], ids[:, -bs:]], 1)
        pos = torch.arange(seq.shape[1])
        model = self.port.model
        hidden, _ = model(seq, pos, None, block_causal_mask(pos, pos, bs))
        logits = model.head(hidden)[..., : self.port.vocab_limit].float()
        if self.port.shift:
            logits = logits[:, start - 1: start - 1 + bs] if start else torch.cat([logits[:, :1], logits[:, :bs - 1]], 1)
        else:
            logits = logits[:, start:]
        return logits if rows is None else logits[rows]


@pytest.mark.parametrize("layout", BLOCK)
def test_block_cached_logits_equal_uncached(layout, block_loaded):
    port = block_loaded[layout]
    assert isinstance(port, BlockDiffusionPort)
    plain = UncachedPort(port)
    bs = port.block_size
    torch.manual_seed(5)
    ids = torch.randint(0, port.vocab_limit, (2, 3 * bs))
    cache, raw = port.new_cache(2), plain.new_cache(2)
    port.prefill(cache, ids[:, :2 * bs], 0)
    plain.prefill(raw, ids[:, :2 * bs], 0)
    window = ids[:, 2 * bs:].clone()
    window[:, 1:] = port.special.mask_id
    assert torch.allclose(port.block_logits(cache, window, 2 * bs), plain.block_logits(raw, window, 2 * bs), atol=TOL)


@pytest.mark.parametrize("layout", BLOCK)
def test_block_cached_decoding_equals_uncached(layout, block_loaded):
    port = block_loaded[layout]
    context = port.encode(PREFIX)
    width = 3 * port.block_size + 1          # several blocks, the last one partial
    canvas = Canvas(torch.tensor(context + [port.special.mask_id] * width + port.encode(SUFFIX)),
                    [(len(context), len(context) + width)])
    settings = DecodeSettings(steps=3, threshold=0.3, n=2, temperature=0.0)
    cached = decode_blockwise(port, canvas, settings)
    plain = decode_blockwise(UncachedPort(port), canvas, settings)
    assert torch.equal(cached.span_ids, plain.span_ids)
    assert cached.steps == plain.steps
    assert not (cached.span_ids == port.special.mask_id).any()


def test_block_shifted_rows_come_from_the_previous_position(block_loaded):
    """Fast-dLLM v2: block row i is the full sequence's logits at position start+i-1."""
    port = block_loaded["fast-dllm-v2"]
    assert port.shift == 1 and port.sub_block_size == 2 and port.block_size == 4
    ids = torch.randint(0, port.vocab_limit, (1, 12))
    cache = port.new_cache(1)
    port.prefill(cache, ids[:, :8], 0)
    got = port.block_logits(cache, ids[:, 8:], 8)
    pos = torch.arange(12)
    full = port.model.head(port.model(ids, pos, None, block_causal_mask(pos, pos, 4))[0])[..., : port.vocab_limit]
    want = full[:, 7:11]
    assert torch.allclose(got, want, atol=TOL)


def test_block_fim_formats_the_context(block_loaded):
    sdar, seed, llada2 = block_loaded["sdar"], block_loaded["stable-diffcoder"], block_loaded["llada2"]
    tok = sdar.tokenizer.token_to_id
    assert sdar.context_ids([1, 2], [3]) == [tok("<|fim_prefix|>"), 1, 2, tok("<|fim_suffix|>"), 3,
                                              tok("<|fim_middle|>")]
    tok = seed.tokenizer.token_to_id
    assert seed.context_ids([1, 2], [3]) == [tok("<[fim-suffix]>"), 3, tok("<[fim-prefix]>"), 1, 2,
                                              tok("<[fim-middle]>")]
    assert llada2.fim is None and llada2.context_ids([1, 2], [3]) == [1, 2]    # no FIM tokens: prefix only


class ScriptedPort:
    """A port whose model always proposes a fixed token per span offset (for the stop rules)."""

    block_size, sub_block_size = 4, None

    def __init__(self, script: dict[int, int], vocab: int, special) -> None:
        self.script, self.vocab, self.special, self.device = script, vocab, special, torch.device("cpu")
        self.t0 = 0

    def context_ids(self, prefix, suffix):
        self.t0 = len(prefix)
        return prefix

    def new_cache(self, batch):
        return None

    def prefill(self, cache, ids, start):
        pass

    def block_logits(self, cache, ids, start, rows=None):
        start += ids.shape[1] - self.block_size            # the current block: the last columns
        logits = torch.zeros(ids.shape[0], self.block_size, self.vocab)
        for i in range(self.block_size):
            logits[:, i, self.script.get(start + i - self.t0, 5)] = 50.0
        return logits if rows is None else logits[rows]


def test_block_stop_rules_end_of_line_and_eos():
    from dllm_lsp.engine.denoiser import SpecialTokens

    special = SpecialTokens(mask_id=9, pad_id=8, eos_id=8)
    canvas = Canvas(torch.tensor([1, 2, 3] + [9] * 12), [(3, 15)], (True,))
    port = ScriptedPort({5: 7}, 10, special)          # a line break at span offset 5
    lines = TokenIndex(["a"] * 7 + ["\n"] + ["a"] * 2)  # token 7 holds the line break
    out = decode_blockwise(port, canvas, DecodeSettings(steps=4), tokens=lines)
    # blocks of 4 from position 0, 3 context tokens: the break lands in the third block, which finishes
    assert out.span_ids[0].tolist() == [5] * 5 + [7] + [5] * 3 + [8] * 3
    canvas = Canvas(torch.tensor([1, 2, 3] + [9] * 12), [(3, 15)])
    port = ScriptedPort({2: 8}, 10, special)          # EOS at offset 2
    out = decode_blockwise(port, canvas, DecodeSettings(steps=4))
    assert out.span_ids[0].tolist() == [5, 5] + [8] * 10
    assert out.steps <= 2


# -- (c) round trips ------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", BLOCK_LAYOUTS)
def test_block_engine_round_trip(layout, block_loaded, block_folders):
    engine = Engine(block_loaded[layout])
    request = InfillRequest.single(PREFIX, SUFFIX, 10)
    first = engine.infill(request, DecodeSettings(steps=4))
    again = engine.infill(request, DecodeSettings(steps=4))
    assert first.candidates == again.candidates
    assert first.tokens_committed <= 10 and first.steps >= 1
    two = engine.infill(InfillRequest(["a = ", " + ", "\n"], [Slot(5), Slot(5)]), DecodeSettings(steps=3, n=2))
    assert len(two.candidates) == 2 and all(len(c) == 2 for c in two.candidates)
    assert not (block_folders[layout] / EXECUTED_MARKER).exists()


def test_block_cli_infill_and_complete(block_folders, tmp_path, monkeypatch, capsys):
    from dllm_lsp.cli import main

    for layout in BLOCK_LAYOUTS:
        lines = [json.dumps({"id": 1, "prefix": PREFIX, "suffix": SUFFIX, "max_tokens": 8})]
        monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
        code = main(["infill", "--model", str(block_folders[layout]), "--device", "cpu", "--steps", "3"])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        reply = json.loads(captured.out.splitlines()[0])
        assert reply["id"] == 1 and isinstance(reply["completion"], str) and reply["steps"] >= 1
    source = tmp_path / "area.py"
    source.write_text(PREFIX + SUFFIX)
    for layout in ("sdar", "llada2", "llada-moe"):
        code = main(["complete", f"{source}:2:12", "--model", str(block_folders[layout]), "--device", "cpu",
                     "--json"])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        assert isinstance(json.loads(captured.out), dict)


@pytest.mark.timeout(240)
async def test_block_server_serves_block_families(tmp_path, block_folders):
    uri = "file:///tmp/area.py"
    client, _, _ = await start_server(tmp_path, {"model": str(block_folders["sdar"]), "device": "cpu", "steps": 3})
    try:
        open_doc(client, uri, PREFIX + SUFFIX)
        for layout in BLOCK_LAYOUTS:
            if layout != "sdar":
                client.workspace_did_change_configuration(
                    types.DidChangeConfigurationParams(settings={"dllm": {"model": str(block_folders[layout])}}))
            status = await _wait_for_model(client, block_folders[layout].name)
            assert status["loaded"] and not status["error"], status
            assert status["family"] == FAMILY_OF[layout].key
            result = await client.text_document_inline_completion_async(inline_params(uri, 1, 11))
            assert isinstance(result, types.InlineCompletionList)
            after = await wait_loaded(client)
            assert after["lastLatencyMs"] is not None
    finally:
        await stop_server(client)


async def _wait_for_model(client, name: str, timeout: float = 60.0) -> dict:
    import asyncio

    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        status = await wait_loaded(client)
        if status.get("model") == name or status.get("error"):
            return status
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"server never switched to {name}: {status}")
        await asyncio.sleep(0.1)


# -- (d) broken folders ---------------------------------------------------------------------------

@pytest.fixture
def damaged(block_folders, tmp_path):
    made = []

    def copy(layout: str):
        made.append(layout)
        target = tmp_path / f"{layout}-{len(made)}"
        shutil.copytree(block_folders[layout], target)
        return target
    return copy


def _load(folder):
    from dllm_lsp.loader import load_model

    return load_model(str(folder), "cpu")


def _rewrite_index(folder, drop: str):
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shard = index["weight_map"].pop(drop)
    tensors = load_file(str(folder / shard))
    del tensors[drop]
    from safetensors.torch import save_file
    save_file(tensors, str(folder / shard), metadata={"format": "pt"})
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


def test_block_broken_folders_are_named(damaged):
    folder = damaged("llada2")
    _rewrite_index(folder, "model.layers.1.mlp.experts.3.up_proj.weight")
    with pytest.raises(ModelLoadError, match=r"lack tensor model\.layers\.1\.mlp\.experts\.3\.up_proj\.weight"):
        _load(folder)

    folder = damaged("sdar-moe")
    config = json.loads((folder / "config.json").read_text())
    config["moe_intermediate_size"] = 48
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=r"experts\.0\.gate_proj\.weight .* has shape \(32, 64\), "
                                             r"but config\.json implies \(48, 64\)"):
        _load(folder)

    folder = damaged("fast-dllm-v2")
    shard = folder / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(ModelLoadError, match="model-00002-of-00002.safetensors .*(truncated|not a readable safetensors)"):
        _load(folder)

    folder = damaged("sdar")
    (folder / "tokenizer.json").write_text(
        (folder / "tokenizer.json").read_text().replace('"<|MASK|>"', '"<|NOMASK|>"'))
    with pytest.raises(ModelLoadError, match="no mask token"):
        _load(folder)

    folder = damaged("llada2")
    config = json.loads((folder / "config.json").read_text())
    config["score_function"] = "softmax"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="LLaDA2.0 with a 'softmax' router is not supported"):
        _load(folder)

    folder = damaged("coda")
    for shard in folder.glob("*.safetensors"):
        shard.unlink()
    (folder / "model.safetensors.index.json").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(ModelLoadError, match="only has pickle weights"):
        _load(folder)


def test_block_unknown_family_lists_the_new_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(ModelLoadError) as err:
        _load(tmp_path)
    for title in ("SDAR", "Stable-DiffCoder", "Fast-dLLM v2", "LLaDA2.0", "LLaDA-MoE", "CoDA"):
        assert title in str(err.value)


def test_block_detection_from_config():
    assert detect_block_family({"architectures": ["SDARForCausalLM"]}).key == "sdar"
    assert detect_block_family({"model_type": "sdar_moe"}).key == "sdar-moe"
    assert detect_block_family({"architectures": ["Fast_dLLM_QwenForCausalLM"]}).key == "fast-dllm-v2"
    assert detect_block_family({"architectures": ["LLaDA2MoeModelLM"]}).key == "llada2"
    assert detect_block_family({"architectures": ["LLaDAMoeModelLM"]}).key == "llada-moe"
    assert detect_block_family({"architectures": ["CoDALanguageModel"]}).key == "coda"
    assert detect_block_family({"architectures": ["SomeDiffCoderForCausalLM"]}).key == "stable-diffcoder"
    assert detect_block_family({"model_type": "qwen2"}) is None


def test_block_random_model_for_benchmarks():
    """The benchmark hook: a random model of any block config, built straight on a device."""
    cfg = BlockConfig(vocab_size=384, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, ffn_dim=48,
                      rope_theta=1e4, norm_eps=1e-6, qk_norm=True,
                      moe=MoEConfig(n_experts=4, top_k=2, ffn_dim=16), dense_layers=(0,))
    model = random_block_model(cfg, "cpu", torch.float32)
    ids = torch.randint(0, 384, (1, 8))
    hidden, kv = model(ids, torch.arange(8), None, block_causal_mask(torch.arange(8), torch.arange(8), 4))
    assert model.head(hidden).shape == (1, 8, 384) and len(kv) == 2
    port = random_block_denoiser(cfg, "cpu", torch.float32, block_size=4)
    canvas = Canvas(torch.tensor(list(range(10)) + [port.special.mask_id] * 8), [(10, 18)])
    out = decode_blockwise(port, canvas, DecodeSettings(steps=2, threshold=1.0))
    assert out.span_ids.shape == (1, 8) and 1 <= out.steps <= 8
    assert block_config(FAMILY_OF["sdar"], {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 1,
                                            "vocab_size": 96, "intermediate_size": 48}).qk_norm



@pytest.mark.parametrize("layout", ["llada-moe", "coda"])
def test_block_bidirectional_families_use_the_dual_cache(layout, block_loaded):
    """LLaDA-MoE and CoDA run in the existing dual-cache session: with the span unchanged, a cached
    step reproduces the exact full pass; the family's shift decides which row predicts a span token."""
    from dllm_lsp.engine.types import CacheSettings

    denoiser = block_loaded[layout]
    assert denoiser.decoding == "fixed" and denoiser.spec.shift == (1 if layout == "coda" else 0)
    ids = torch.randint(0, denoiser.vocab_limit, (14,))
    ids[4:9] = denoiser.special.mask_id
    canvas = Canvas(ids, [(4, 9)])
    dual = denoiser.session(canvas, 1, CacheSettings("dual"))
    first, second = dual.logits(ids[None]), dual.logits(ids[None])
    exact = denoiser.session(canvas, 1, CacheSettings("none")).logits(ids[None])
    assert dual.full_passes == 1
    assert torch.allclose(first, exact, atol=TOL) and torch.allclose(second, exact, atol=TOL)


def test_block_budget_left_holes_are_filled_greedily():
    """An end held back (not yet at its slot's frontier) when a block's step budget runs out is
    filled by one greedy pass, so every position is decided."""
    from dllm_lsp.engine.denoiser import SpecialTokens

    special = SpecialTokens(mask_id=9, pad_id=8, eos_id=8)
    canvas = Canvas(torch.tensor([1, 2, 3, 4] + [9] * 4), [(4, 8)])
    port = ScriptedPort({1: 8}, 10, special)
    out = decode_blockwise(port, canvas, DecodeSettings(steps=1, confidence="margin", threshold=1.5))
    assert out.span_ids[0].tolist() == [5, 8, 5, 5] and out.steps == 2


@pytest.mark.parametrize("changes, fragment", [
    ({"block_size": 10**9}, "block size 1000000000 must be within 1.."),   # the first request ran out of memory
    ({"num_hidden_layers": 0}, "'num_hidden_layers' is 0"),                  # served from no layers at all
    ({"attention_bias": "false"}, "'attention_bias' must be true or false"),
])
def test_a_block_family_config_of_an_impossible_size_is_refused_at_load(damaged, changes, fragment):
    folder = damaged("sdar")
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=re.escape(fragment)):
        _load(folder)
