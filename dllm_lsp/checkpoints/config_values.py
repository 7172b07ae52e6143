"""config.json values of the open-checkpoint families, read strictly, and the shape limits.

Hugging Face configs write sizes as JSON integers and switches as JSON booleans. A size of
`true` or `64.5` (read as 1 and 64 by `int`), a switch of `"false"` (true to `bool`), or a size of
zero, a negative one or a billion is a broken folder: it is refused at load with one line, before
anything is built or allocated for it (a billion layers hung the load building them; a zero layer
count loaded and failed every request; a billion-token block ran the machine out of memory at the
first request). `optional(..., low=0)` for counts that may be zero, `file=` for
generation_config.json; floats may have an upper bound too (LLaDA2's partial_rotary_factor).
"""
from __future__ import annotations

from dllm_lsp.model_folder import MAX_LAYERS, MAX_SIZE, ModelLoadError



def need(config: dict, key: str, family: str, kind: type = int, high: float | None = None) -> int | float:
    """`config[key]`, which the family needs: a positive JSON integer up to `high` (kind=int;
    default MAX_SIZE) or a positive finite number up to `high` (kind=float: RoPE's base, a norm's
    epsilon)."""
    if config.get(key) is None:
        raise ModelLoadError(f"config.json lacks {key!r}, which the {family} family needs")
    return _checked(config, key, kind, high)


def optional(config: dict, key: str, default, kind: type = int, high: float | None = None, low: int = 1,
             file: str = "config.json"):
    """`config[key]` when it is there and not null, else `default`; checked as `need` checks.
    `low=0` for counts that may be zero (shared experts, leading dense layers)."""
    if config.get(key) is None:
        return default
    return _checked(config, key, kind, high, low, file)


def flag(config: dict, key: str, default: bool) -> bool:
    """A switch: a JSON boolean (`"false"` is a string, and was read as true)."""
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ModelLoadError(f"config.json {key!r} must be true or false, not {value!r}")
    return value


def _checked(config: dict, key: str, kind: type, high: float | None, low: int = 1, file: str = "config.json"):
    value = config[key]
    if kind is float:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not (number and 0 < value < float("inf") and (high is None or value <= high)):   # NaN fails too
            within = "a positive number" if high is None else f"a number in (0, {high}]"
            raise ModelLoadError(f"{file} {key!r} must be {within}, not {value!r}")
        return float(value)
    high = MAX_SIZE if high is None else high
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelLoadError(f"{file} {key!r} must be an integer, not {value!r}")
    if not low <= value <= high:
        raise ModelLoadError(f"{file} {key!r} is {value}: it must be within {low}..{high}")
    return value


def head_width(config: dict, dim: int, heads: int, dim_key: str, heads_key: str, key: str | None = "head_dim") -> int:
    """The width of an attention head: config.json's `key` where it names one (it need not be
    dim / heads: Qwen3-4B's heads are 128 wide in a 2,560-wide model), else `dim // heads`, which
    must then come out whole (a remainder was dropped without a word: heads narrower than the
    config's author meant). `key=None` for families whose configs have no such key (LLaDA).

    Either way it must be even: rotary position embeddings rotate pairs of channels, and an odd
    head loaded (its weights agreed with its config) and then failed its first forward pass with
    a shape error, after the whole model had been copied to the device."""
    if key is not None and config.get(key) is not None:
        width = optional(config, key, None)
        source = f"config.json {key!r} is {width}"
    else:
        if dim % heads:
            named = f", and no {key!r} names the width of a head" if key is not None else ""
            raise ModelLoadError(f"config.json {dim_key!r} {dim} does not divide into {heads_key!r} {heads} "
                                 f"attention heads{named}")
        width = dim // heads
        source = f"config.json {dim_key!r} {dim} / {heads_key!r} {heads} makes heads {width} wide"
    if width % 2:
        raise ModelLoadError(f"{source}: rotary position embeddings need an even head_dim (they rotate pairs of "
                             "channels)")
    return width


def check_shape(sizes: dict[str, int]) -> None:
    """The sizes a config implies (after defaults and arithmetic such as `dim // heads`): each
    at least 1, layers at most MAX_LAYERS. ValueError: the loaders say "impossible shape"."""
    for name, value in sizes.items():
        high = MAX_LAYERS if name == "n_layers" else MAX_SIZE
        if not 1 <= value <= high:
            raise ValueError(f"{name} is {value}: it must be within 1..{high}")
