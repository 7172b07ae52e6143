"""What the CLI subcommands do (argument parsing is in cli.py)."""
from __future__ import annotations

import asyncio
import bisect
import functools
import json
import logging
import os
import queue
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch

from . import pipeline
from .bench.latency import run_latency_bench
from .cli_errors import one_line, write_out
from .engine.engine import CanvasTooSmall, Engine, out_of_memory
from .engine.types import InfillRequest
from .lifetime import end_with_parent
from .cpus import usable_cpus
from .loader import ModelLoadError, load_model, read_config, resolve_device, resolve_model_path
from .options import Options, SettingsError, snake_to_camel
from .server import auth, create_server
from .server.model_host import LoadKey, ModelHost, local_engine, use_cuda_graphs
from .server.positions import line_end, line_starts
from .serving import require_ray
from .server.tcp import serve_tcp
from .server.transport import replace_lone_surrogates
from .syntax.languages import language_id_for_path, language_name
from .syntax.snapshot import Snapshot

MAX_FILE_BYTES = 8 * 1024 * 1024


MAX_INFILL_TOKENS = 1024   # one infill line's slot at most


class UserError(Exception):
    """A problem with the user's input: printed as one line, exit status 1."""


DEFAULT_THREADS = 1
THREADS_ENV = "DLLM_LSP_THREADS"


def apply_threads(args) -> int:
    """Set torch's CPU thread count deliberately: --threads, else $DLLM_LSP_THREADS, else 1.

    Completion is a chain of small matrix products (a span of 32 rows through a small model):
    with several threads they mostly wait on each other, and on a machine that also runs an
    editor, a language server's neighbours and a build, torch's default (every core) makes the
    latency swing by seconds. One thread measured fastest and steadiest here (docs/cli.md);
    raise it for a big model on an otherwise idle many-core CPU.
    """
    value = getattr(args, "threads", None)
    if value is None:
        raw = os.environ.get(THREADS_ENV, "").strip()
        if raw:
            if not raw.isdecimal() or int(raw) < 1:
                raise UserError(f"{THREADS_ENV} must be a positive integer, not {raw!r}")
            value = int(raw)
        else:
            value = DEFAULT_THREADS
    if value < 1:
        raise UserError(f"--threads must be at least 1, not {value}")
    limit = max_threads()
    if value > limit:
        # 100000 segfaulted torch's thread pool, 32768 hung it, and either starved the machine of
        # threads while it tried
        raise UserError(f"--threads {value} is more than this machine can use: at most {limit} "
                        f"(4 per usable core, at least {MIN_THREADS_LIMIT})")
    torch.set_num_threads(value)
    return value


MIN_THREADS_LIMIT = 64


def max_threads() -> int:
    return max(MIN_THREADS_LIMIT, 4 * usable_cpus())


def serve(args) -> int:
    end_with_parent()      # a server a benchmark started ends with it
    apply_threads(args)
    try:
        logging.basicConfig(
            filename=args.log_file, level=getattr(logging, str(args.log_level).upper(), logging.INFO),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    except OSError as exc:
        raise UserError(f"cannot write the log file {args.log_file}: {os_reason(exc)}") from None
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("pygls").setLevel(logging.WARNING)   # pygls logs every message at INFO
    overrides = {k: v for k, v in (("model", args.model), ("device", args.device)) if v}
    settings = Options().merged(overrides)
    if getattr(args, "ray", None):
        model_host = remote_host(args.ray, args.ray_app)
    else:
        check_model_folder(settings.model.model, settings.model.device)
        if args.max_models < 1:
            raise UserError(f"--max-models must be at least 1, not {args.max_models}")
        if args.step_slack is not None and not args.step_slack >= 1:
            raise UserError(f"--step-slack must be at least 1, not {args.step_slack}")
        model_host = ModelHost(connect=functools.partial(local_engine, batching=args.batching,
                                                         prefix_cache=args.prefix_cache, step_slack=args.step_slack,
                                                         context_in_first_step=args.context_pass == "first-step",
                                                         warm_up=args.warm_up, cuda_graphs=args.cuda_graphs),
                               max_models=args.max_models)
        model_host.pin(settings.model.model, settings.model.device)   # the operator's: clients' never evict it
    if args.tcp:
        host, port = parse_host_port(args.tcp)
        try:
            token = auth.load_token(getattr(args, "token_file", None))
            auth.check_bind(host, token)
        except auth.AuthError as exc:
            raise UserError(str(exc)) from None
        try:
            interrupted = asyncio.run(serve_tcp(host, port, settings, token, model_host,
                                                allowed_model_dirs=getattr(args, "allow_model_dir", None) or ()))
        except OSError as exc:   # the port is taken, the host is not this machine's, ...
            raise UserError(f"cannot listen on {host}:{port}: {os_reason(exc)}") from None
        if interrupted:   # as over stdio, below: the model threads are not waited for
            logging.shutdown()
            os._exit(130)
    else:
        code = create_server(settings, host=model_host).start_io()
        # The client is gone: end the process now. The model threads may still be busy (loading a
        # checkpoint takes a minute for a 7B one, a denoise step runs to its end), and a normal
        # interpreter exit would wait for them. Nothing is left to save: every answer was flushed as
        # it was written, and the log is flushed here.
        logging.shutdown()
        os._exit(code)
    return 0


def check_model_folder(model: str, device: str) -> None:
    """The operator's `--model` and `--device` refused at start, in one line, when they name no
    model folder or no device: the server loads the model only when a client first asks, so a
    misspelt one had been served, exit status 0 when the editor closed, every completion failing
    with the reason in the client's log. Only the folder and its config.json are looked at here;
    the weights load later, as before (a client's own options may name another model)."""
    try:
        read_config(resolve_model_path(model, resolve_device(device).type))
    except ModelLoadError as exc:
        raise UserError(str(exc)) from None


REMOTE_WORKERS = 32   # infills the front keeps in flight to a Ray deployment (its replicas queue the rest)
REMOTE_RETRY_S = 5.0  # a deployment that could not be reached is tried again after this long


def remote_host(address: str, app: str) -> ModelHost:
    """A model host whose engine is the Ray Serve deployment at `address`: the model, device and
    replicas are the deployment's, so the clients' model and device options do not apply."""
    try:
        require_ray()
    except ImportError as exc:
        raise UserError(str(exc)) from None
    # Imported here: Ray is an optional dependency (the "ray" extra), needed only with --ray.
    from .serving.ray_serve import RemoteEngine  # noqa: PLC0415

    def connect(model: str, device: str) -> RemoteEngine:
        engine = RemoteEngine(address, app)
        logging.getLogger(__name__).info("serving through Ray at %s (%s); the model/device options "
                                         "(%s, %s) are the deployment's", address, app, model, device)
        return engine

    # Every client is served by the one deployment, whatever its options name: one key for all
    # (distinct `model` options counted against --max-models and refused the third client), and a
    # deployment that is not up yet is asked for again at a request 5 s or more after the last try.
    def the_deployment(model: str, device: str) -> LoadKey:
        return LoadKey(f"ray://{address}/{app}", "remote")

    return ModelHost(connect=connect, workers=REMOTE_WORKERS, key_of=the_deployment, retry_failed_s=REMOTE_RETRY_S)


def os_reason(exc: OSError) -> str:
    """An OSError's reason without the paths and tuples asyncio and open() wrap around it."""
    if isinstance(exc.errno, int) and exc.errno > 0:
        return os.strerror(exc.errno).lower()
    return str(exc.strerror or exc)


def parse_host_port(spec: str) -> tuple[str, int]:
    host, _, port = spec.rpartition(":")
    if not port.isdecimal():
        raise UserError(f"--tcp needs HOST:PORT or :PORT, not {spec!r}")
    if not 0 < int(port) < 65536:
        raise UserError(f"--tcp port must be within 1..65535, not {port}")
    return host or "127.0.0.1", int(port)


def load_engine(args, batching: bool = False):
    """The engine for the one-shot commands (complete, infill, bench). They send one request at a
    time (but `infill --concurrency`), so the cross-request step scheduler has nothing to batch;
    without it no background thread is left running torch when the process exits (that aborted
    `complete` at exit now and then: "terminate called without an active exception"; `infill`
    closes the scheduler it asked for before it exits)."""
    try:
        engine = Engine(load_model(args.model, args.device), batching=batching)
    except ModelLoadError as exc:
        raise UserError(str(exc)) from None
    use_cuda_graphs(engine, getattr(args, "cuda_graphs", False))
    return engine


def read_source(path: Path) -> str:
    if not path.exists():
        raise UserError(f"{path} is not a file: no such file or directory")
    if not path.is_file():
        raise UserError(f"{path} is not a file" + (": it is a folder" if path.is_dir() else ""))
    if path.stat().st_size > MAX_FILE_BYTES:
        raise UserError(f"{path} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        raise UserError(f"{path} looks binary")
    try:
        return data.decode("utf-8-sig")     # a BOM is no character of line 1 (editors hide it too)
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text") from None


def parse_location(spec: str) -> tuple[Path, int, int]:
    parts = spec.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdecimal() or not parts[2].isdecimal():
        raise UserError(f"expected FILE:LINE:COL (1-based), got {spec!r}")
    line, col = int(parts[1]), int(parts[2])
    if line < 1 or col < 1:
        raise UserError("LINE and COL are 1-based")
    return Path(parts[0]), line, col


def offset_for(text: str, line: int, col: int) -> int:
    """The string offset of 1-based `line`, `col`: lines end where LSP ends them (\\r\\n, \\r or
    \\n, as the server counts them), columns count characters (code points) before the line end."""
    starts = line_starts(text)
    if line > len(starts):
        raise UserError(f"line {line} is past the end of the file ({len(starts)} lines)")
    start = starts[line - 1]
    length = line_end(text, start) - start
    if col - 1 > length:
        raise UserError(f"column {col} is past the end of line {line} ({length} characters)")
    return start + col - 1


def line_col(text: str, offset: int) -> dict:
    """1-based line and column of a string offset, counted as `offset_for` counts them."""
    starts = line_starts(text)
    line = bisect.bisect_right(starts, offset)
    return {"line": line, "col": offset - starts[line - 1] + 1}


def cli_options(args) -> Options:
    """The options schema's defaults with the CLI's flags applied (a flag left out keeps the
    default the server would use, so `complete` and an editor agree)."""
    steps = getattr(args, "steps", None)
    given = {"model": args.model, "device": args.device, "steps": steps,
             "ends_balanced": getattr(args, "ends_balanced", None),
             "companion_edits": getattr(args, "companion_edits", None),
             "min_confidence": getattr(args, "min_confidence", None),
             "alternatives": getattr(args, "alternatives", None)}
    given = {k: v for k, v in given.items() if v is not None}
    try:
        return Options().merged(given)
    except SettingsError as exc:
        # The refusal names the option as a client spells it (`minConfidence must be within
        # 0..1`); the user typed a flag: name that and the value it was given (the option's name
        # kept where it is another word: the server's docs and settings call it that).
        for key, value in given.items():
            try:
                Options().merged({key: value})
            except SettingsError as alone:
                text, wire, flag = str(alone), snake_to_camel(key), "--" + key.replace("_", "-")
                if text.startswith(wire) and wire == key:
                    raise UserError(f"{flag}{text[len(wire):]}, not {value}") from None
                raise UserError(f"{flag} {value}: {text}") from None
        raise UserError(str(exc)) from None


def complete(args) -> int:
    apply_threads(args)
    path, line, col = parse_location(args.location)
    text = read_source(path)
    offset = offset_for(text, line, col)
    language = args.language or language_id_for_path(str(path))
    options = cli_options(args)
    engine = load_engine(args)
    if args.language and language_name(args.language) is None:
        print(f"dllm-lsp: warning: no grammar for language {args.language!r}: completing with line rules only",
              file=sys.stderr)
    # The same pipeline as the server's: planner, companion import slot, one context budget.
    try:
        plan = pipeline.plan(Snapshot.parse(text, language), offset, options,
                             model_context=engine.denoiser.max_context, model_max_slot=engine.denoiser.max_slot)
    except pipeline.PlanError as exc:
        raise UserError(str(exc)) from None
    try:
        result = plan.run(engine)
    except CanvasTooSmall as exc:
        raise UserError(f"the model cannot complete here: {exc}") from None
    except (MemoryError, RuntimeError) as exc:     # torch.cuda.OutOfMemoryError is a RuntimeError
        if not out_of_memory(exc):
            raise
        raise UserError(f"out of memory for this completion ({one_line(exc)}); a smaller model, or --device cpu, "
                        "needs less") from None
    found = plan.finish(result)
    held_back = plan.finish(result, gate=False) if found is None else None   # shown but for minConfidence
    completion = found.text if found is not None else ""
    refused = None if found is not None else plan.model_text(result)   # what was refused, read from the cursor on
    why = None if refused is None else no_completion_reason(plan, refused, held_back)
    if args.json:
        span = plan.span
        reply = {
            "file": str(path), "line": line, "col": col, "language": language,
            "completion": completion, "replace_from": line_col(text, span.replace_start),
            "kind": span.kind, "model": engine.denoiser.name, "steps": result.steps,
            "latency_ms": round(result.latency_ms, 2),
        }
        shown = found or held_back
        if shown is not None and shown.confidence is not None:
            reply["confidence"] = shown.confidence.to_json()
        if found is not None and found.alternatives:
            reply["alternatives"] = [other.text for other in found.alternatives]
        if found is not None and found.companion is not None:
            reply["companion"] = {"import": found.companion.statement,
                                  "line": line_col(text, found.companion.offset)["line"]}
        if why is not None:
            reply["reason"] = why
            reply["model_text"] = refused
        print(json.dumps(reply))
    elif why is not None:   # nothing on stdout (not an empty line): say why on stderr
        print(f"dllm-lsp: no completion: {why}", file=sys.stderr)
    else:
        print(completion)
    return 0


def no_completion_reason(plan, raw: str, held_back=None) -> str:
    """Why the editor would show nothing, in words, for `raw`, the model's text that post-processing
    refused (CompletionPlan.model_text); `held_back`: the completion the confidence gate refused."""
    if held_back is not None:
        return (f"the model was less sure of {held_back.text!r} (mean confidence "
                f"{held_back.confidence.mean:.3f}) than minConfidence {plan.min_confidence}")
    if plan.span.single_line:
        raw = raw.split("\n", 1)[0]
    if not raw.strip():
        return "nothing to complete here (the model wrote nothing at this position)"
    typed = plan.span.typed_prefix
    if typed and not raw.startswith(typed):
        return f"the model's guess does not continue the typed {typed!r}"
    return "the model's guess did not parse here, or only repeated the text after the cursor"


def stdin_lines() -> Iterator[str | UnicodeDecodeError]:
    """stdin's lines, each decoded on its own: a line that is not UTF-8 comes as its error, whatever
    encoding the locale gives stdin (a strict one raised on it and ended the stream). A text
    stream without bytes below it (set in-process) is read as it is."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        yield from sys.stdin
        return
    for data in stream:
        try:
            yield data.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield exc


def infill(args) -> int:
    """JSONL in, JSONL out, in input order, each reply printed as soon as it and every line before
    it are done (the input may be a pipe another program writes to as it reads the replies). With
    `--concurrency N`, up to N lines are in flight at once and share denoising steps through the
    engine's step scheduler."""
    apply_threads(args)
    if args.concurrency < 1:
        raise UserError(f"--concurrency must be at least 1, not {args.concurrency}")
    if args.max_tokens is not None and not 1 <= args.max_tokens <= MAX_INFILL_TOKENS:
        raise UserError(f"--max-tokens must be within 1..{MAX_INFILL_TOKENS}, not {args.max_tokens}")
    if sys.stdin.isatty():
        # `dllm-lsp infill` typed without `< requests.jsonl`: it would wait without a word
        print('dllm-lsp infill: reading requests from the terminal, one JSON object a line '
              '({"id": 1, "prefix": "...", "suffix": "..."}); Ctrl-D ends, `< FILE.jsonl` reads a file',
              file=sys.stderr)
    options = cli_options(args)
    settings = options.decode.decode_settings()
    default_max = args.max_tokens if args.max_tokens is not None else options.planner.max_line_tokens
    engine = load_engine(args, batching=args.concurrency > 1)
    # Every setting from the options schema, as the server sends them (the engine's own defaults
    # are copies of the schema's, not the source).
    run = functools.partial(engine.infill, settings=settings, cache=options.model.cache_settings(),
                            context_tokens=options.planner.context_budget(engine.denoiser.max_context))
    room = threading.BoundedSemaphore(args.concurrency)      # lines read but not yet answered
    replies: queue.SimpleQueue[tuple[int, Future] | None] = queue.SimpleQueue()

    reader_gone = threading.Event()

    def write() -> None:
        while (item := replies.get()) is not None:
            number, future = item
            try:
                reply = future.result()
            except Exception as exc:   # noqa: BLE001 - out of memory, say: that line fails, the stream goes on
                reply = {"id": None, "error": f"line {number}: {type(exc).__name__}: {exc}"}
            if not reader_gone.is_set():
                try:
                    print(json.dumps(reply), flush=True)
                except (BrokenPipeError, ValueError):
                    # `| head -1`: whoever read the replies has gone. Stop reading lines (the
                    # process had waited for ever for room), and send what is left nowhere.
                    reader_gone.set()
                    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            room.release()

    writer = threading.Thread(target=write, name="infill-replies")
    writer.start()
    try:
        with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
            for number, raw in enumerate(stdin_lines(), start=1):
                room.acquire()
                if reader_gone.is_set():
                    room.release()
                    break
                if isinstance(raw, UnicodeDecodeError):   # answered here, in its turn: no model work
                    refused: Future = Future()
                    refused.set_result({"id": None, "error": f"line {number} is not UTF-8 ({raw.reason} at byte {raw.start})"})
                    replies.put((number, refused))
                    continue
                if not raw.strip():
                    room.release()
                    continue
                replies.put((number, pool.submit(infill_line, run, raw, number, default_max, InfillRequest)))
    finally:
        replies.put(None)
        writer.join()
    if engine.batching:
        stats = engine.scheduler.stats()
        engine.scheduler.close()
        print(f"dllm-lsp infill: {stats['requestSteps']} request steps in {stats['forwardPasses']} forward passes "
              f"(up to {stats['largestBatch']} requests in one pass)", file=sys.stderr)
    return 0


def infill_line(run, raw: str, number: int, default_max: int, request_cls) -> dict:
    """One JSONL request -> one reply; a bad line gets an `error` reply and the stream goes on."""
    try:
        # a lone UTF-16 surrogate ("\ud800", which JSON allows and no tokenizer takes) becomes
        # U+FFFD, as the server's transport reads it
        item, _ = replace_lone_surrogates(json.loads(raw))
    except json.JSONDecodeError as exc:
        return {"id": None, "error": f"line {number}: not JSON: {exc.msg}"}
    if not isinstance(item, dict):
        return {"id": None, "error": f"line {number}: expected a JSON object"}
    ident = item.get("id")
    prefix, suffix = item.get("prefix"), item.get("suffix", "")
    max_tokens = item.get("max_tokens", default_max)
    if not isinstance(prefix, str) or not isinstance(suffix, str):
        return {"id": ident, "error": "prefix and suffix must be strings"}
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_INFILL_TOKENS:
        return {"id": ident, "error": f"max_tokens must be an integer within 1..{MAX_INFILL_TOKENS}"}
    language = item.get("language")
    if language is not None and not isinstance(language, str):
        return {"id": ident, "error": "language must be a string (an LSP languageId such as \"python\")"}
    starts_with = item.get("starts_with", "")
    if not isinstance(starts_with, str) or "\n" in starts_with or "\r" in starts_with:
        return {"id": ident, "error": "starts_with must be a string without line breaks (a word typed halfway)"}
    try:
        request = request_cls.single(prefix, suffix, max_tokens, language=language_name(language or ""),
                                     starts_with=starts_with)
        result = run(request)
    except ValueError as exc:
        return {"id": ident, "error": str(exc)}
    except Exception as exc:   # noqa: BLE001 - out of memory, say: this line fails with its id, the stream goes on
        return {"id": ident, "error": f"{type(exc).__name__}: {exc}"}
    return {"id": ident, "completion": result.text, "steps": result.steps, "latency_ms": round(result.latency_ms, 2)}


def bench(args) -> int:
    apply_threads(args)
    if args.runs < 1:
        raise UserError(f"--runs must be at least 1, not {args.runs}")
    engine = load_engine(args)
    steps = args.steps if args.steps is not None else Options().decode.steps
    given = [n.strip() for n in (args.also_steps or "").split(",") if n.strip()]
    if not all(n.isdecimal() for n in given):
        raise UserError(f"--also-steps takes step budgets separated by commas, not {args.also_steps!r}")
    also = tuple(int(n) for n in given)
    if not 1 <= steps <= 256 or not all(1 <= n <= 256 for n in also):
        raise UserError("--steps and --also-steps must be within 1..256")
    figures = run_latency_bench(engine, runs=args.runs, steps=steps, profile=args.profile,
                                cuda_graphs=True if args.cuda_graphs else None, also_steps=also)
    text = json.dumps(figures, indent=2)
    if args.out:
        write_out(args.out, text + "\n")
    if args.json:
        print(text)
    else:
        # what was measured first: a table of numbers does not say which model on which device
        model = figures.get("model", {})
        print(f"{model.get('name', engine.denoiser.name)} on {model.get('device', args.device)}, {steps} steps, "
              f"{args.runs} runs a case (--json for every figure)")
        width = max(len(name) for name in figures["cases"])   # `line_tail_alternatives_4` is 24 wide
        for name, row in figures["cases"].items():
            print(f"{name:{width}s}  p50 {row['p50_ms']:8.2f} ms  p95 {row['p95_ms']:8.2f} ms  steps {row['steps']:3d}  "
                  f"slot {row['slot_width_decoded']}/{row['span_tokens']} tokens")
        for name, found in figures.get("profile", {}).items():
            if "error" in found:
                print(f"{name}: profile failed: {found['error']}")
                continue
            print(f"{name}: profiled {found['wall_ms_per_call']:.1f} ms a completion, {found['ops_per_call']:.0f} torch ops, "
                  + (f"{found['kernel_launches_per_call']:.0f} launches, {found['device_syncs_per_call']:.0f} syncs, "
                     f"device busy {found['device_busy_share']:.0%}; " if "device_busy_share" in found else "")
                  + "Python: " + ", ".join(f"{r['function'].rsplit('/', 1)[-1]} {r['own_ms_per_call']:.2f} ms"
                                           for r in found["python_top"][:4]))
    return 0
