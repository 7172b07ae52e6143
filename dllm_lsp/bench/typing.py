"""`dllm-lsp bench typing`: replay a person typing real source files through the real server.

Each client is one TCP connection to one `dllm-lsp serve --tcp` process, with one document of
its own: a real source file whose regions (the next lines of a function, say) were cut out and
are typed back character by character, at a human pace, with pauses at line ends, typos
corrected with backspace, jumps between regions, and the suggestion accepted when it is what
the person was about to type. Every keystroke is an incremental `didChange` followed by an
`inlineCompletion` request; a request still running at the next keystroke is cancelled, as
editors do. For 1, 2, 4 and 8 concurrent clients, and for every server variant (a set of
options, e.g. prefix reuse or batching off), side by side in one run, it reports:

- keystroke -> suggestion latency p50 / p95 (answered requests),
- the share of keystrokes answered before the next keystroke superseded them,
- accepted suggestions and the characters they saved, typed-through hits (the server's own
  counter, where it keeps one), requests per second,
- where the server's model time went (`server_work`, from `dllm/status` before and after): the
  share of the wall its model thread was at work, and of that the share spent on context
  (prefill) rather than denoising steps, the context tokens served from the prefix cache, and
  `context_free_speedup`, the most any context reuse could lower that model time (Amdahl: the
  steps remain). With one client (no queueing) it bounds what prefix reuse can do for latency,

as JSON with the device, versions and settings, and a PNG (latency and throughput against
clients). Every request must end answered or cancelled: `unanswered` counts those that never
came back, and any are a server bug.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import shlex
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from dllm_lsp.cli_errors import output_file, report as report_error, write_out
from dllm_lsp.serving.local_cluster import RayCluster

from .environment import environment, percentiles

DEFAULT_FILES = ("textwrap.py", "json/encoder.py", "argparse.py", "dataclasses.py", "csv.py",
                 "statistics.py", "fractions.py", "shlex.py")
STATUS_METHOD = "dllm/status"
CANCELLED = -32800


@dataclass
class Pace:
    """A person's typing: lognormal gaps between keys, longer pauses at line ends."""

    chars_per_minute: float = 300.0
    line_pause_s: tuple[float, float] = (0.3, 1.2)
    line_pause_prob: float = 0.35
    typo_prob: float = 0.03
    accept_prob: float = 0.8
    speed: float = 1.0            # >1 replays faster than a person (the pattern stays the same)

    def gap(self, rng: random.Random) -> float:
        mean = 60.0 / self.chars_per_minute
        return rng.lognormvariate(math.log(mean) - 0.18, 0.6) / self.speed

    def line_pause(self, rng: random.Random) -> float:
        if rng.random() < self.line_pause_prob:
            return rng.uniform(*self.line_pause_s) / self.speed
        return 0.0


@dataclass
class Segment:
    line: int            # where the typing happens (0-based line of the cut-out region)
    text: str            # what is typed there


@dataclass
class Script:
    """A document with regions cut out, and the regions to type back."""

    uri: str
    document: str
    segments: list[Segment]


def stdlib_file(name: str) -> Path:
    return Path(sysconfig.get_paths()["stdlib"]) / name


def make_script(path: Path, client: int, rng: random.Random, keystrokes: int, lines_per_segment: int = 3) -> Script:
    """Cut regions (a few indented lines each, inside functions) out of `path` until they hold
    about `keystrokes` characters; the document is the file without them."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    candidates = [i for i in range(len(lines) - lines_per_segment)
                  if lines[i].startswith("        ") and lines[i].strip() and not lines[i].strip().startswith("#")
                  and all(lines[j].strip() for j in range(i, i + lines_per_segment))]
    rng.shuffle(candidates)
    chosen: list[int] = []
    total = 0
    for i in candidates:
        if total >= keystrokes:
            break
        if any(abs(i - j) < lines_per_segment + 2 for j in chosen):
            continue
        chosen.append(i)
        total += sum(len(lines[j]) for j in range(i, i + lines_per_segment))
    chosen.sort()
    removed = {j for i in chosen for j in range(i, i + lines_per_segment)}
    document = "".join(line for j, line in enumerate(lines) if j not in removed)
    # Segments are typed back in order, so when segment k's turn comes the document is the file
    # without segments k, k+1, ...: all after its line, which is therefore its line in the file.
    segments = [Segment(i, "".join(lines[i:i + lines_per_segment])) for i in chosen]
    return Script(f"file:///typing/client{client}/{path.name}", document, segments)


@dataclass
class ClientStats:
    keystrokes: int = 0
    answered: int = 0             # a suggestion (or an empty answer) came back before the next keystroke
    superseded: int = 0           # cancelled by the next keystroke
    failed: int = 0               # an error other than cancellation
    unanswered: int = 0           # never came back at all (a server bug)
    shown: int = 0                # answers with a non-empty suggestion
    accepted: int = 0
    accepted_chars: int = 0
    latencies_ms: list[float] = field(default_factory=list)


class Typist:
    """One client: its connection, its document, its typing."""

    def __init__(self, index: int, script: Script, pace: Pace, seed: int) -> None:
        self.index = index
        self.script = script
        self.pace = pace
        self.rng = random.Random(seed)
        self.client = LanguageClient(f"dllm-typing-{index}", "v1")
        self.stats = ClientStats()
        self.version = 1
        self.pending: dict[str, asyncio.Future] = {}
        self.latest: tuple[int, int, asyncio.Future] | None = None   # (line, col, answer) of the last request

    async def connect(self, host: str, port: int, options: dict) -> None:
        await self.client.start_tcp(host, port)
        await self.client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(), initialization_options=options))
        self.client.initialized(types.InitializedParams())
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=self.script.uri, language_id="python", version=1,
                                                 text=self.script.document)))

    def edit(self, line: int, col: int, end_line: int, end_col: int, text: str) -> None:
        self.version += 1
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=self.script.uri, version=self.version),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(line, col), types.Position(end_line, end_col)), text=text)]))

    async def type_text(self, line: int, col: int, text: str) -> tuple[int, int]:
        """Insert `text` at (line, col) one key at a time; returns the cursor after it."""
        i = 0
        while i < len(text):
            ch = text[i]
            if ch != "\n" and self.rng.random() < self.pace.typo_prob:
                line, col = await self.key(line, col, "x")          # a typo ...
                line, col = await self.backspace(line, col)         # ... corrected
            line, col = await self.key(line, col, ch)
            i += 1
            if ch == "\n":
                await asyncio.sleep(self.pace.line_pause(self.rng))
            suggestion = self.latest_suggestion(line, col)
            rest = text[i:]
            if suggestion and len(suggestion) >= 3 and rest.startswith(suggestion) \
                    and self.rng.random() < self.pace.accept_prob:
                self.stats.accepted += 1
                self.stats.accepted_chars += len(suggestion)
                line, col = self.insert(line, col, suggestion)
                i += len(suggestion)
        return line, col

    def insert(self, line: int, col: int, text: str) -> tuple[int, int]:
        self.edit(line, col, line, col, text)
        parts = text.split("\n")
        if len(parts) == 1:
            return line, col + len(text)
        return line + len(parts) - 1, len(parts[-1])

    async def key(self, line: int, col: int, ch: str) -> tuple[int, int]:
        await asyncio.sleep(self.pace.gap(self.rng))
        line, col = self.insert(line, col, ch)
        self.request(line, col)
        return line, col

    async def backspace(self, line: int, col: int) -> tuple[int, int]:
        await asyncio.sleep(self.pace.gap(self.rng))
        self.edit(line, col - 1, line, col, "")
        col -= 1
        self.request(line, col)
        return line, col

    def request(self, line: int, col: int) -> None:
        for msg_id, fut in list(self.pending.items()):
            if not fut.done():   # the editor moves on: the previous request is cancelled
                self.client.protocol.notify("$/cancelRequest", types.CancelParams(id=msg_id))
        self.stats.keystrokes += 1
        msg_id = f"c{self.index}-k{self.stats.keystrokes}"
        params = types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=self.script.uri), position=types.Position(line, col),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))
        sent = time.perf_counter()
        future = asyncio.wrap_future(self.client.protocol.send_request(
            types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=msg_id))
        self.pending[msg_id] = future
        future.add_done_callback(lambda fut, sent=sent, key=self.stats.keystrokes: self.done(fut, sent, key))
        self.latest = (line, col, future)

    def done(self, fut: asyncio.Future, sent: float, key: int) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            code = getattr(exc, "code", None)
            if code == CANCELLED:
                self.stats.superseded += 1
            else:
                self.stats.failed += 1
            return
        self.stats.answered += 1
        self.stats.latencies_ms.append((time.perf_counter() - sent) * 1000)
        result = fut.result()
        items = getattr(result, "items", None) or []
        if items and getattr(items[0], "insert_text", ""):
            self.stats.shown += 1

    def latest_suggestion(self, line: int, col: int) -> str | None:
        """What the last request suggests typing at the cursor, if it has come back already."""
        if self.latest is None:
            return None
        at_line, at_col, fut = self.latest
        if (at_line, at_col) != (line, col) or not fut.done() or fut.cancelled() or fut.exception() is not None:
            return None
        items = getattr(fut.result(), "items", None) or []
        if not items or not isinstance(items[0].insert_text, str):
            return None
        start = items[0].range.start if items[0].range is not None else types.Position(line, col)
        # A range that starts before the cursor re-types the partial word: only a suggestion that
        # starts at the cursor is compared with what comes next (a simplification, counted alike).
        return items[0].insert_text if (start.line, start.character) == (line, col) else None

    async def run(self) -> None:
        for seg in self.script.segments:
            await asyncio.sleep(self.rng.uniform(0.3, 1.0) / self.pace.speed)   # a jump: find the spot, think
            line = seg.line
            # Open a line for the segment, then type it (without its final newline: the open line has one).
            self.insert(line, 0, "\n")
            await self.type_text(line, 0, seg.text.rstrip("\n"))
        await self.drain()

    async def drain(self, timeout: float = 60.0) -> None:
        futures = [f for f in self.pending.values() if not f.done()]
        if futures:
            done, not_done = await asyncio.wait(futures, timeout=timeout)
            self.stats.unanswered += len(not_done)

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), timeout=10)
            self.client.exit(None)
        except Exception:
            pass
        try:
            await asyncio.wait_for(self.client.stop(), timeout=10)
        except Exception:
            pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode} before listening")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.1)
    raise TimeoutError(f"the server did not listen on port {port} within {timeout:.0f} s")


def plain(value):
    """pygls hands back JSON objects as named tuples: turn them (nested too) into dicts."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


async def wait_loaded(client: LanguageClient, timeout: float = 300.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = plain(await client.protocol.send_request_async(STATUS_METHOD, {}))
        if status.get("error"):
            raise RuntimeError(f"the model failed to load: {status['error']}")
        if status.get("loaded") and not status.get("loading"):
            return status
        if time.monotonic() > deadline:
            raise TimeoutError(f"model not loaded: {status}")
        await asyncio.sleep(0.1)


async def run_clients(n: int, options: dict, args, files: list[Path], log, serve_args: list[str] = (),
                      env: dict | None = None) -> dict:
    port = free_port()
    cmd = [sys.executable, "-m", "dllm_lsp", "serve", "--tcp", f"127.0.0.1:{port}", "--log-level", "WARNING",
           *serve_args]
    remote = "--ray" in serve_args
    if args.model and not remote:
        cmd += ["--model", args.model]
    if args.device and not remote:
        cmd += ["--device", args.device]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    typists: list[Typist] = []
    try:
        await wait_for_port(port, proc)
        for i in range(n):
            rng = random.Random(args.seed * 1000 + i)
            script = make_script(files[i % len(files)], i, rng, args.keystrokes)
            typists.append(Typist(i, script, Pace(speed=args.speed), args.seed * 1000 + i))
        for t in typists:
            await t.connect("127.0.0.1", port, options)
        started = time.perf_counter()
        status = await wait_loaded(typists[0].client)
        load_s = time.perf_counter() - started
        t0 = time.perf_counter()
        await asyncio.gather(*(t.run() for t in typists))
        wall = time.perf_counter() - t0
        # Counters are per connection (typed-through, prefetch, ...): summed over the clients.
        finals = [plain(await t.client.protocol.send_request_async(STATUS_METHOD, {})) for t in typists]
        final = dict(finals[0])
        for key in ("typedThroughHits", "prefetchStarted", "prefetchHits", "rebased", "dropped"):
            if all(isinstance(f.get(key), int) for f in finals):
                final[key] = sum(f[key] for f in finals)
    finally:
        for t in typists:
            await t.close()
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    stats = [t.stats for t in typists]
    latencies = [ms for s in stats for ms in s.latencies_ms]
    keys = sum(s.keystrokes for s in stats)
    row = {
        "clients": n, "keystrokes": keys, "wall_s": round(wall, 2), "model_load_s": round(load_s, 2),
        "answered": sum(s.answered for s in stats), "superseded": sum(s.superseded for s in stats),
        "failed": sum(s.failed for s in stats), "unanswered": sum(s.unanswered for s in stats),
        "shown": sum(s.shown for s in stats), "accepted": sum(s.accepted for s in stats),
        "accepted_chars": sum(s.accepted_chars for s in stats),
        "answered_share": round(sum(s.answered for s in stats) / max(keys, 1), 4),
        "requests_per_s": round(sum(s.answered for s in stats) / max(wall, 1e-9), 2),
        "latency": percentiles(latencies) if latencies else None,
        "typed_through_hits": final.get("typedThroughHits"), "prefetch_hits": final.get("prefetchHits"),
        "prefetch_started": final.get("prefetchStarted"), "rebased": final.get("rebased"),
        "dropped": final.get("dropped"),
        "server_batching": final.get("batching"),
        "server_work": work_between(status.get("work"), final.get("work"), wall, final.get("batching")),
        "model": status.get("model"),
    }
    work = row["server_work"]
    busy = (f", model busy {work['busy_share']:.0%} of the wall, context {work['context_share']:.0%} of that"
            if work and work["busy_share"] is not None and work["context_share"] is not None else "")
    log(f"  {n} client(s): p50 {row['latency']['p50_ms'] if row['latency'] else '-'} ms, "
        f"answered {row['answered_share']:.0%}, {row['requests_per_s']} req/s, unanswered {row['unanswered']}{busy}")
    return row


def work_between(before: dict | None, after: dict | None, wall: float, batching: dict | None) -> dict | None:
    """The server's model work during the replay, from two `work` readings of `dllm/status`
    (None for a server that reports none: a remote engine)."""
    if not before or not after:
        return None
    busy = after["busySeconds"] - before["busySeconds"]
    ctx = {key: after["context"][key] - before["context"][key]
           for key in ("sessions", "tokens", "reusedTokens", "seconds")}
    out = {
        "busy_s": round(busy, 3),
        "busy_share": round(busy / wall, 4) if wall > 0 else None,
        "context_s": round(ctx["seconds"], 3),
        "context_share": round(ctx["seconds"] / busy, 4) if busy > 0 else None,
        "sessions": ctx["sessions"],
        "context_tokens": ctx["tokens"],
        "reused_share": round(ctx["reusedTokens"] / ctx["tokens"], 4) if ctx["tokens"] else None,
        "context_ms_per_session": round(1000 * ctx["seconds"] / ctx["sessions"], 3) if ctx["sessions"] else None,
        # Model time with the context for free: what is left is the steps.
        "context_free_speedup": round(busy / (busy - ctx["seconds"]), 3) if busy > ctx["seconds"] > 0 else None,
    }
    if batching and batching.get("forwardPasses"):
        out["requests_per_forward"] = round(batching["requestSteps"] / batching["forwardPasses"], 3)
    return out


def plot(result: dict, png: Path) -> None:
    import matplotlib   # noqa: PLC0415  (optional: only the plot needs it)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt   # noqa: PLC0415

    fig, (ax1, ax2, ax3, ax4) = plt.subplots(1, 4, figsize=(19, 4.4), dpi=110)
    for i, (name, rows) in enumerate(result["variants"].items()):
        color = f"C{i}"
        xs = [r["clients"] for r in rows if r["latency"]]
        ax1.plot(xs, [r["latency"]["p50_ms"] for r in rows if r["latency"]], "o-", color=color, label=f"{name} p50")
        ax1.plot(xs, [r["latency"]["p95_ms"] for r in rows if r["latency"]], "s--", color=color, label=f"{name} p95")
        ax2.plot([r["clients"] for r in rows], [r["requests_per_s"] for r in rows], "o-", color=color, label=name)
        # What a user sees: answers with a suggestion in them, per second of typing.
        ax3.plot([r["clients"] for r in rows], [r["shown"] / r["wall_s"] if r["wall_s"] else 0.0 for r in rows],
                 "o-", color=color, label=name)
        # Where the model's time went: busy share of the wall, and the context's share of that.
        work = [(r["clients"], r["server_work"]) for r in rows if r.get("server_work")]
        if work:
            ax4.plot([c for c, _ in work], [w["busy_share"] or 0.0 for _, w in work], "o-", color=color,
                     label=f"{name} busy")
            ax4.plot([c for c, _ in work], [w["context_share"] or 0.0 for _, w in work], "s:", color=color,
                     label=f"{name} context")
    ax1.set(xlabel="concurrent clients", ylabel="keystroke -> suggestion (ms)", title="latency", xscale="log")
    ax2.set(xlabel="concurrent clients", ylabel="answered requests / s", title="throughput", xscale="log")
    ax3.set(xlabel="concurrent clients", ylabel="suggestions shown / s", title="suggestions shown", xscale="log")
    ax4.set(xlabel="concurrent clients", ylabel="share", ylim=(0, 1), xscale="log",
            title="model thread: busy / wall, context / busy")
    for ax in (ax1, ax2, ax3, ax4):
        ax.minorticks_off()   # log axes: label the client counts themselves, nothing in between
        ax.set_xticks(result["settings"]["clients"], labels=[str(c) for c in result["settings"]["clients"]])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"typing replay, {result['settings']['model'] or 'default model'} on {result['environment']['device']}")
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="dllm-lsp bench typing", description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", default="1,2,4,8", help="concurrent client counts, comma-separated")
    p.add_argument("--keystrokes", type=int, default=150, help="characters each client types (about)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=JSON",
                   help="server options (initializationOptions) to compare, e.g. 'no-reuse={...}' "
                        "(default: one variant, the server's defaults)")
    p.add_argument("--serve-variant", action="append", default=[], metavar="NAME=ARGS",
                   help="a server started with these extra `dllm-lsp serve` arguments, e.g. "
                        "'serial=--no-batching' or 'no-reuse=--prefix-cache 0' (compared side by side)")
    p.add_argument("--model", default=None)
    p.add_argument("--device", default=None)
    p.add_argument("--file", action="append", type=Path, default=[], help="source file to type (default: stdlib files)")
    p.add_argument("--speed", type=float, default=1.0, help="replay this many times faster than a person")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=output_file, default=None, help="write the JSON here")
    p.add_argument("--plot", type=Path, default=None, help="write the PNG here")
    p.add_argument("--json", action="store_true")
    p.add_argument("--ray-replicas", default=None, metavar="N,M",
                   help="instead of the variants: start a Ray cluster on this machine and compare fronts "
                        "(serve --ray) over deployments of N, M, ... replicas of --model")
    return p.parse_args(argv)


def variants_of(specs: list[str], serve_specs: list[str] = ()) -> dict[str, tuple[dict, list[str]]]:
    """NAME -> (initializationOptions, extra `serve` arguments) of each variant to compare."""
    out: dict[str, tuple[dict, list[str]]] = {}
    for spec in serve_specs:
        name, _, raw = spec.partition("=")
        if not name:
            raise ValueError(f"--serve-variant wants NAME=ARGS, not {spec!r}")
        out[name] = ({}, shlex.split(raw))
    if not specs and not out:
        return {"default": ({}, [])}
    for spec in specs:
        name, _, raw = spec.partition("=")
        try:
            options = json.loads(raw) if raw else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"--variant {name}: not JSON: {exc}") from None
        if not name or not isinstance(options, dict):
            raise ValueError(f"--variant wants NAME=JSON-object, not {spec!r}")
        out[name] = (options, [])
    return out


async def bench(args, log) -> dict:
    try:
        clients = [int(c) for c in args.clients.split(",") if c.strip()]
    except ValueError:
        clients = []
    if not clients or min(clients) < 1:
        raise ValueError(f"--clients needs positive counts such as 1,2,4, not {args.clients!r}")
    if not args.speed > 0:
        raise ValueError(f"--speed must be more than 0 (times faster than a person), not {args.speed:g}")
    if args.keystrokes < 1:
        raise ValueError(f"--keystrokes must be at least 1, not {args.keystrokes}")
    files = args.file or [stdlib_file(name) for name in DEFAULT_FILES]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ValueError(f"source files not found: {', '.join(missing)}")
    if args.ray_replicas:
        return await bench_ray(args, clients, files, log)
    variants = variants_of(args.variant, args.serve_variant)
    result = {
        "benchmark": "typing replay through the real server (TCP), keystroke -> inline suggestion",
        "settings": {"clients": clients, "keystrokes_per_client": args.keystrokes, "speed": args.speed,
                     "seed": args.seed, "model": args.model, "files": [str(f) for f in files],
                     "pace": vars(Pace(speed=args.speed))},
        "environment": environment(args.device),
        "variants": {},
    }
    # Variants interleave per client count, so a noisy machine hits them alike.
    for n in clients:
        for name, (options, serve_args) in variants.items():
            log(f"{name}: {n} client(s)")
            row = await run_clients(n, options, args, files, log, serve_args=serve_args)
            result["variants"].setdefault(name, []).append(row)
    return result


async def bench_ray(args, clients: list[int], files: list[Path], log) -> dict:
    """The typing replay against Ray Serve deployments of 1, 2, ... replicas, side by side."""
    counts = [int(c) for c in args.ray_replicas.split(",") if c.strip()]
    if not counts or min(counts) < 1:
        raise ValueError("--ray-replicas needs positive counts")
    result = {
        "benchmark": "typing replay through the LSP front (TCP) and a Ray Serve deployment on this machine",
        "settings": {"clients": clients, "keystrokes_per_client": args.keystrokes, "speed": args.speed,
                     "seed": args.seed, "model": args.model, "files": [str(f) for f in files],
                     "ray_replicas": counts, "pace": vars(Pace(speed=args.speed))},
        "environment": environment(args.device),
        "variants": {},
    }
    with tempfile.TemporaryDirectory(prefix="dllm-ray-") as tmp, RayCluster(Path(tmp), cpus=max(4, max(counts))) as ray:
        for n in clients:
            for replicas in counts:
                deployed = ray.dllm("ray", "deploy", "--address", ray.address, "--model", args.model or "default",
                                    "--device", args.device or "cpu", "--replicas", str(replicas),
                                    "--num-cpus", "0.5", timeout=600)
                if deployed.returncode != 0:
                    raise RuntimeError(f"dllm-lsp ray deploy failed: {deployed.stderr.strip()[-500:]}")
                name = f"ray-{replicas}-replica{'s' if replicas > 1 else ''}"
                log(f"{name}: {n} client(s)")
                row = await run_clients(n, {}, args, files, log, serve_args=["--ray", ray.address],
                                        env=ray.env)   # the cluster's token
                result["variants"].setdefault(name, []).append(row)
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    log = (lambda msg: print(msg, file=sys.stderr, flush=True))
    try:
        result = asyncio.run(bench(args, log))
    except (ValueError, RuntimeError, TimeoutError, OSError) as exc:
        return report_error("dllm-lsp bench typing", exc)
    text = json.dumps(result, indent=1)
    if args.out:
        write_out(args.out, text + "\n")
    if args.plot:
        plot(result, args.plot)
    if args.json or not args.out:
        print(text)
    return 0
