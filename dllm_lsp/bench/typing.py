"""`dllm-lsp bench typing`: replay a person typing real source files through the real server.

Each client is one TCP connection to one `dllm-lsp serve --tcp` process, with one document of
its own: a real source file whose regions (the next lines of a function, say) were cut out and
are typed back character by character, at a human pace, with pauses at line ends, typos
corrected with backspace, jumps between regions, and the suggestion accepted when it is what
the person was about to type: before each key, after the pause that precedes it (the time the
last request had to come back), the person looks at the suggestion at the cursor, and accepting
it (Tab) types the suggestion's text over its range, as an editor does, which is the edit the
server recognises and prefetches after. Every keystroke, an accept included, is an incremental
`didChange` followed by an `inlineCompletion` request; a request still running at the next
keystroke is cancelled, as editors do. For 1, 2, 4 and 8 concurrent clients, and for every
server variant (a set of options, e.g. prefix reuse or batching off), side by side in one run,
it reports:

- keystroke -> suggestion latency p50 / p95 (every answer that came back, late ones included:
  leaving those out would flatter the latency),
- the share of keystrokes answered before the next keystroke superseded them (`late` counts the
  answers that came after the next keystroke's cancel had been sent, which an editor drops),
- accepted suggestions and the characters they saved, typed-through hits (the server's own
  counter, where it keeps one), requests per second,
- where the server's model time went (`server_work`, from `dllm/status` before and after): the
  share of the wall its model thread was at work, and of that the share spent on context
  (prefill) rather than denoising steps, the context tokens served from the prefix cache, and
  `context_free_speedup`, the most any context reuse could lower that model time (Amdahl: the
  steps remain). With one client (no queueing) it bounds what prefix reuse can do for latency,

as JSON with the device, versions and settings (each variant's options and serve arguments
among them), and a PNG (latency and throughput against clients). Every request must end
answered or cancelled (answered + late + superseded + failed + unanswered = keystrokes): `unanswered`
counts those that never came back, and any are a server bug.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import math
import random
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from dllm_lsp.cli_errors import output_file, report as report_error, write_figure, write_out
from dllm_lsp.lifetime import child_env, cleanup_on_termination
from dllm_lsp.net import free_port
from dllm_lsp.serving.local_cluster import RayCluster
from dllm_lsp.syntax.languages import facts_for, language_id_for_path

from .environment import environment, percentiles

DEFAULT_FILES = ("textwrap.py", "json/encoder.py", "argparse.py", "dataclasses.py", "csv.py",
                 "statistics.py", "fractions.py", "shlex.py")
STATUS_METHOD = "dllm/status"
CANCELLED = -32800
STATUS_TIMEOUT_S = 30.0      # a dllm/status answer takes milliseconds: longer is a server that hangs
LINES_PER_SEGMENT = 3


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
    language_id: str = "python"


def stdlib_file(name: str) -> Path:
    return Path(sysconfig.get_paths()["stdlib"]) / name


def segment_starts(lines: list[str], language_id: str, lines_per_segment: int = LINES_PER_SEGMENT) -> list[int]:
    """Where a region can be cut out: `lines_per_segment` non-blank lines, the first indented
    two levels of the language's default indentation (inside a function or method) and no
    comment."""
    indent = facts_for(language_id).indent_unit * 2
    comment = facts_for(language_id).line_comment or "#"
    return [i for i in range(len(lines) - lines_per_segment)
            if lines[i].startswith(indent) and lines[i].strip() and not lines[i].strip().startswith(comment)
            and all(lines[j].strip() for j in range(i, i + lines_per_segment))]


def make_script(path: Path, client: int, rng: random.Random, keystrokes: int,
                lines_per_segment: int = LINES_PER_SEGMENT) -> Script:
    """Cut regions (a few indented lines each, inside functions) out of `path` until they hold
    about `keystrokes` characters; the document is the file without them."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    language_id = language_id_for_path(path)
    candidates = segment_starts(lines, language_id, lines_per_segment)
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
    return Script(f"file:///typing/client{client}/{path.name}", document, segments, language_id)


@dataclass
class ClientStats:
    keystrokes: int = 0           # requests: one per key press (an accept too)
    answered: int = 0             # a suggestion (or an empty answer) came back before the next keystroke
    late: int = 0                 # an answer that came after the next keystroke had cancelled its request
    superseded: int = 0           # cancelled by the next keystroke
    failed: int = 0               # an error other than cancellation
    unanswered: int = 0           # never came back at all (a server bug)
    shown: int = 0                # answers in time with a non-empty suggestion
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
        self.pending: dict[str, tuple[int, asyncio.Future]] = {}     # msg id -> (keystroke, answer)
        self.given_up: set[int] = set()     # requests counted unanswered: an answer after that is not counted again
        # Requests the next keystroke cancelled. The server may still answer one (it finished
        # before the cancel arrived); the editor has moved on and drops that answer, so it is late.
        self.cancelled: set[int] = set()
        self.latest: tuple[int, int, asyncio.Future] | None = None   # (line, col, answer) of the last request

    async def connect(self, host: str, port: int, options: dict) -> None:
        await self.client.start_tcp(host, port)
        await self.client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(), initialization_options=options))
        self.client.initialized(types.InitializedParams())
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=self.script.uri, language_id=self.script.language_id, version=1,
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
            # The pause before a key comes first and the look at the suggestion after it: a
            # suggestion is seen when its answer came back before the person's next key, not
            # only when it came back before the request was sent (never).
            await asyncio.sleep(self.pace.gap(self.rng))
            accepted = self.accept(line, col, text, i)
            if accepted is not None:
                line, col, i = accepted
                continue
            ch = text[i]
            if ch != "\n" and self.rng.random() < self.pace.typo_prob:
                line, col = self.press(line, col, "x")               # a typo ...
                line, col = await self.backspace(line, col)          # ... corrected after a pause,
                continue                                             # then the key after another
            line, col = self.press(line, col, ch)
            i += 1
            if ch == "\n":
                await asyncio.sleep(self.pace.line_pause(self.rng))
        return line, col

    def accept(self, line: int, col: int, text: str, i: int) -> tuple[int, int, int] | None:
        """Take the suggestion at the cursor (Tab) when what it adds is what comes next in `text`
        (from `i` on), at least 3 characters, with the pace's probability: its text typed over
        its range (the edit the server knows as an accept), then a request at the new cursor,
        as an editor asks again after an accept. The cursor and `i` after it; None if not taken."""
        found = self.latest_suggestion(line, col)
        if found is None:
            return None
        start, suggestion = found
        # A range that starts before the cursor types the start of the word again: that part
        # must be what is on the line already (as far as this text typed it) ...
        typed = text[text.rfind("\n", 0, i) + 1:i]
        again = col - start
        if again > len(typed) or not suggestion.startswith(typed[len(typed) - again:]):
            return None
        new = suggestion[again:]          # ... and the rest is what the person was about to type
        if len(new) < 3 or not text.startswith(new, i) or self.rng.random() >= self.pace.accept_prob:
            return None
        self.stats.accepted += 1
        self.stats.accepted_chars += len(new)
        line, col = self.replace(line, start, col, suggestion)
        self.request(line, col)
        return line, col, i + len(new)

    def insert(self, line: int, col: int, text: str) -> tuple[int, int]:
        return self.replace(line, col, col, text)

    def replace(self, line: int, start: int, end: int, text: str) -> tuple[int, int]:
        """Replace columns start..end of `line` with `text`; the cursor after it."""
        self.edit(line, start, line, end, text)
        parts = text.split("\n")
        if len(parts) == 1:
            return line, start + len(text)
        return line + len(parts) - 1, len(parts[-1])

    def press(self, line: int, col: int, ch: str) -> tuple[int, int]:
        """A key typed at the cursor, and its request (the pause before it is the caller's)."""
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
        for msg_id, (key, fut) in list(self.pending.items()):
            if not fut.done():   # the editor moves on: the previous request is cancelled
                self.cancelled.add(key)
                self.client.protocol.notify("$/cancelRequest", types.CancelParams(id=msg_id))
            else:
                del self.pending[msg_id]       # finished: `done` counts it
        self.stats.keystrokes += 1
        msg_id = f"c{self.index}-k{self.stats.keystrokes}"
        params = types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=self.script.uri), position=types.Position(line, col),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))
        sent = time.perf_counter()
        future = asyncio.wrap_future(self.client.protocol.send_request(
            types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=msg_id))
        self.pending[msg_id] = (self.stats.keystrokes, future)
        future.add_done_callback(lambda fut, sent=sent, key=self.stats.keystrokes: self.done(fut, sent, key))
        self.latest = (line, col, future)

    def done(self, fut: asyncio.Future, sent: float, key: int) -> None:
        if fut.cancelled() or key in self.given_up:   # (given up on: counted unanswered already)
            return
        exc = fut.exception()
        if exc is not None:
            code = getattr(exc, "code", None)
            if code == CANCELLED:
                self.stats.superseded += 1
            else:
                self.stats.failed += 1
            return
        self.stats.latencies_ms.append((time.perf_counter() - sent) * 1000)
        if key in self.cancelled:
            self.stats.late += 1
            return
        self.stats.answered += 1
        result = fut.result()
        items = getattr(result, "items", None) or []
        if items and getattr(items[0], "insert_text", ""):
            self.stats.shown += 1

    def latest_suggestion(self, line: int, col: int) -> tuple[int, str] | None:
        """What the last request suggests at the cursor, if it has come back already: the column
        its range starts at and its text. Only a range on the cursor's line that ends at the
        cursor (one that replaced text after it would not restore the file) is taken."""
        if self.latest is None:
            return None
        at_line, at_col, fut = self.latest
        if (at_line, at_col) != (line, col) or not fut.done() or fut.cancelled() or fut.exception() is not None:
            return None
        items = getattr(fut.result(), "items", None) or []
        if not items or not isinstance(items[0].insert_text, str) or not items[0].insert_text:
            return None
        at = items[0].range or types.Range(types.Position(line, col), types.Position(line, col))
        if at.start.line != line or (at.end.line, at.end.character) != (line, col) or at.start.character > col:
            return None
        return at.start.character, items[0].insert_text

    async def run(self) -> None:
        for seg in self.script.segments:
            await asyncio.sleep(self.rng.uniform(0.3, 1.0) / self.pace.speed)   # a jump: find the spot, think
            line = seg.line
            # Open a line for the segment, then type it (without its final newline: the open line has one).
            self.insert(line, 0, "\n")
            await self.type_text(line, 0, seg.text.rstrip("\n"))
        await self.drain()

    async def drain(self, timeout: float = 60.0) -> None:
        futures = [f for _, f in self.pending.values() if not f.done()]
        if futures:
            done, not_done = await asyncio.wait(futures, timeout=timeout)
            self.stats.unanswered += len(not_done)
            self.given_up.update(key for key, f in self.pending.values() if f in not_done)

    async def close(self, handshake: bool = True) -> None:
        """End the connection: `shutdown` and `exit` first when `handshake` (the server is up and
        answers), then the client's own end. Without it, the server is already gone."""
        if handshake:
            try:
                await asyncio.wait_for(self.client.shutdown_async(None), timeout=10)
                self.client.exit(None)
            except Exception:
                pass
        try:
            await asyncio.wait_for(self.client.stop(), timeout=10)
        except Exception:
            pass


def log_tail(log) -> str:
    """The last line of the server's log file with text in it ('' for none): why it stopped."""
    log.flush()
    log.seek(0, 2)
    log.seek(max(0, log.tell() - 4096))
    lines = [line.strip() for line in log.read().decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1][-300:] if lines else ""


async def wait_for_port(port: int, proc: subprocess.Popen, log=None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            said = log_tail(log) if log is not None else ""
            raise RuntimeError(f"the server exited with status {proc.returncode} before listening"
                               + (f": {said}" if said else ""))
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


async def server_status(client: LanguageClient, timeout: float = STATUS_TIMEOUT_S) -> dict:
    """`dllm/status`, or TimeoutError: a server that no longer answers must not hang the bench."""
    try:
        return plain(await asyncio.wait_for(client.protocol.send_request_async(STATUS_METHOD, {}), timeout))
    except asyncio.TimeoutError:
        raise TimeoutError(f"the server did not answer {STATUS_METHOD} within {timeout:.0f} s") from None


async def wait_loaded(client: LanguageClient, timeout: float = 300.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = await server_status(client, max(STATUS_TIMEOUT_S, deadline - time.monotonic()))
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
    # The server's log goes to a file, not a pipe that nothing reads during the replay: once a
    # pipe held 64 KiB (INFO logs a line per cancelled request) the server's next log line
    # blocked it for good, and every request after that went unanswered. The file's last line
    # says why a server that did not start stopped.
    server_log = tempfile.TemporaryFile(prefix="dllm-typing-serve-", suffix=".log")
    proc: subprocess.Popen | None = None
    typists: list[Typist] = []
    finished = False
    try:
        # The server ends with the bench, a SIGKILL of the bench included (it was left listening,
        # its model loaded, by every bench stopped that way: lifetime.py). Started inside the
        # `try`, so a stop that lands as it starts still ends it here.
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=server_log, env=child_env(env))
        await wait_for_port(port, proc, server_log)
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
        finals = [await server_status(t.client) for t in typists]
        final = dict(finals[0])
        for key in ("typedThroughHits", "prefetchStarted", "prefetchHits", "rebased", "dropped"):
            if all(isinstance(f.get(key), int) for f in finals):
                final[key] = sum(f[key] for f in finals)
        finished = True
    finally:
        if finished:
            for t in typists:
                await t.close()
            end_server(proc)
        else:
            # Stopped (SIGTERM at the GPU job's time box, Ctrl-C, an error): the server is ended
            # first and the clients are closed without the `shutdown` handshake. A server the same
            # signal had ended (the job signals the whole process group) never answered it, and
            # each client waited 10 s for the answer; a server still up kept each client's
            # connection open, and its end waited as long. That time came out of the step's grace
            # before its SIGKILL, and out of the GPU lease.
            end_server(proc)
            for t in typists:
                await t.close(handshake=False)
        server_log.close()
    stats = [t.stats for t in typists]
    latencies = [ms for s in stats for ms in s.latencies_ms]
    keys = sum(s.keystrokes for s in stats)
    row = {
        "clients": n, "keystrokes": keys, "wall_s": round(wall, 2), "model_load_s": round(load_s, 2),
        "answered": sum(s.answered for s in stats), "late": sum(s.late for s in stats),
        "superseded": sum(s.superseded for s in stats),
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


def end_server(proc: subprocess.Popen | None) -> None:
    """Terminate the bench's server (if it was started) and wait for it; killed if it lingers."""
    if proc is None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


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


def matplotlib_importable() -> bool:
    try:
        importlib.import_module("matplotlib")   # optional: only the plot needs it
    except ImportError:
        return False
    return True


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
    try:
        write_figure(fig, png)   # whole or not at all; as --out, its missing folders are created
    finally:
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
    p.add_argument("--plot", type=output_file, default=None, help="write the PNG here")
    p.add_argument("--json", action="store_true")
    p.add_argument("--ray-replicas", default=None, metavar="N,M",
                   help="instead of the variants: start a Ray cluster on this machine and compare fronts "
                        "(serve --ray) over deployments of N, M, ... replicas of --model")
    return p.parse_args(argv)


def check_typeable(path: Path) -> None:
    """A --file the replay can type in, or ValueError: one with no region to cut out would run
    with 0 keystrokes and report nothing, as if it had measured something."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror.lower() if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise ValueError(f"cannot read --file {path}: {reason}") from None
    language_id = language_id_for_path(path)
    if not segment_starts(lines, language_id):
        indent = facts_for(language_id).indent_unit * 2
        raise ValueError(f"--file {path} has nothing to type: no {LINES_PER_SEGMENT} non-blank lines in a row "
                         f"indented {indent!r} or more (inside a function) to cut out and type back")


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
    for f in args.file:
        check_typeable(f)
    if args.ray_replicas:
        return await bench_ray(args, clients, files, log)
    variants = variants_of(args.variant, args.serve_variant)
    result = {
        "benchmark": "typing replay through the real server (TCP), keystroke -> inline suggestion",
        "settings": {"clients": clients, "keystrokes_per_client": args.keystrokes, "speed": args.speed,
                     "seed": args.seed, "model": args.model, "device": args.device,
                     "files": [str(f) for f in files], "pace": vars(Pace(speed=args.speed)),
                     # What each variant was, not only its name: the options its clients sent
                     # (initializationOptions) and the arguments its server was started with.
                     "variants": {name: {"options": options, "serve_args": list(serve_args)}
                                  for name, (options, serve_args) in variants.items()}},
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

    def name_of(replicas: int) -> str:
        return f"ray-{replicas}-replica{'s' if replicas > 1 else ''}"

    def deploy_args(replicas: int) -> list[str]:
        return ["--model", args.model or "default", "--device", args.device or "cpu", "--replicas", str(replicas),
                "--num-cpus", "0.5"]

    result = {
        "benchmark": "typing replay through the LSP front (TCP) and a Ray Serve deployment on this machine",
        "settings": {"clients": clients, "keystrokes_per_client": args.keystrokes, "speed": args.speed,
                     "seed": args.seed, "model": args.model, "device": args.device,
                     "files": [str(f) for f in files], "ray_replicas": counts, "pace": vars(Pace(speed=args.speed)),
                     # (the front's --ray address is the bench's own cluster's, a new one each run)
                     "variants": {name_of(n): {"options": {}, "serve_args": ["--ray"], "deploy_args": deploy_args(n)}
                                  for n in counts}},
        "environment": environment(args.device),
        "variants": {},
    }
    with tempfile.TemporaryDirectory(prefix="dllm-ray-") as tmp, RayCluster(Path(tmp), cpus=max(4, max(counts))) as ray:
        for n in clients:
            for replicas in counts:
                deployed = ray.dllm("ray", "deploy", "--address", ray.address, *deploy_args(replicas), timeout=600)
                if deployed.returncode != 0:
                    raise RuntimeError(f"dllm-lsp ray deploy failed: {deployed.stderr.strip()[-500:]}")
                name = name_of(replicas)
                log(f"{name}: {n} client(s)")
                row = await run_clients(n, {}, args, files, log, serve_args=["--ray", ray.address],
                                        env=ray.env)   # the cluster's token
                result["variants"].setdefault(name, []).append(row)
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # matplotlib is optional (the `test` extra has it, a plain install not): a --plot it cannot
    # draw is refused before the run, as an unwritable --plot is, not after minutes of typing.
    if args.plot and not matplotlib_importable():
        return report_error("dllm-lsp bench typing", "--plot needs matplotlib (pip install matplotlib)")
    log = (lambda msg: print(msg, file=sys.stderr, flush=True))
    try:
        with cleanup_on_termination():   # SIGTERM / SIGHUP stop its servers and Ray cluster too
            result = asyncio.run(bench(args, log))
    except (ValueError, RuntimeError, TimeoutError, OSError) as exc:
        return report_error("dllm-lsp bench typing", exc)
    text = json.dumps(result, indent=1)
    # The figures first: a plot that fails must not cost the run's JSON.
    if args.out:
        write_out(args.out, text + "\n", "dllm-lsp bench typing")
    if args.json or not args.out:
        print(text, flush=True)
    if args.plot:
        try:
            plot(result, args.plot)
        except ImportError:
            return report_error("dllm-lsp bench typing", "--plot needs matplotlib (pip install matplotlib)")
        except OSError as exc:
            return report_error("dllm-lsp bench typing", f"cannot write --plot {args.plot}: {exc.strerror or exc}")
        except ValueError as exc:     # a suffix that names no format matplotlib writes
            return report_error("dllm-lsp bench typing", f"cannot write --plot {args.plot}: {exc}")
    return 0
