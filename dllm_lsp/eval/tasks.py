"""HumanEval-Infilling tasks: loading, named benchmark files, and the program each completion runs as."""
from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path

FILES = {
    "single-line": "HumanEval-SingleLineInfilling.jsonl.gz",
    "multi-line": "HumanEval-MultiLineInfilling.jsonl.gz",
    "random-span": "HumanEval-RandomSpanInfilling.jsonl.gz",
    "random-span-light": "HumanEval-RandomSpanInfillingLight.jsonl.gz",
}
REQUIRED = ("task_id", "prompt", "suffix", "canonical_solution", "test", "entry_point")
JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


@dataclass(frozen=True)
class Task:
    task_id: str
    prompt: str
    suffix: str
    canonical_solution: str
    test: str
    entry_point: str

    def program(self, completion: str) -> str:
        """The program that passes when it exits cleanly (the benchmark's own definition)."""
        return self.run_as(f"{self.prompt}{completion}{self.suffix}")

    def run_as(self, source: str) -> str:
        """`source` (the task's code, filled somehow) as the program the benchmark runs."""
        return f"{source}\n{self.test}\n\ncheck({self.entry_point})\n"

    def in_editor(self, typed_chars: int = 0, through: str = "") -> tuple[str, int]:
        """(document, cursor offset): the task as a file open in an editor with the middle not yet
        written. Where the middle starts a line, its indentation is typed (pressing Enter
        indents), and where it ends one, its line is there, empty after the cursor: the user
        opened it. `typed_chars`: the user has also typed that many characters of the middle's
        first line after its indentation (at most all but its last), so the cursor may sit inside
        a word. `through`: the user has typed that line up to and with its first character from
        `through` instead (the cursor just after a bracket, a dot, an operator: `typed_through`
        says where; no such character types nothing). Filling the rest of the middle at the cursor
        gives back the reference program."""
        middle = self.canonical_solution
        typed = ""
        if not self.prompt or self.prompt.endswith("\n"):
            typed = middle[:len(middle) - len(middle.lstrip(" \t"))]
        count = self.typed_through(through) if through else typed_chars
        if count and count > 0:
            first_line = middle[len(typed):].split("\n", 1)[0]
            typed += first_line[:min(count, max(len(first_line) - 1, 0))]
        opened = "\n" if middle.endswith("\n") and middle.strip() else ""
        return f"{self.prompt}{typed}{opened}{self.suffix}", len(self.prompt) + len(typed)

    def typed_through(self, characters: str) -> int | None:
        """How many characters of the middle's first line (after its indentation) end with its
        first character from `characters`, or None where that line has none before its last
        character (nothing would be left to complete)."""
        middle = self.canonical_solution
        line = middle.lstrip(" \t") if not self.prompt or self.prompt.endswith("\n") else middle
        line = line.split("\n", 1)[0]
        for i, ch in enumerate(line[:-1]):
            if ch in characters:
                return i + 1
        return None


DATA_ENV = "DLLM_LSP_EVAL_DATA"
DATA_SOURCE = ("https://github.com/openai/human-eval-infilling (its data/ folder, MIT; the files are "
               + ", ".join(FILES.values()) + ")")


def default_data_dir() -> Path:
    """Where the short names are looked up: $DLLM_LSP_EVAL_DATA, else `shared/eval/human-eval-infilling`
    beside the repository (the layout of the dev checkout and CI)."""
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV]).expanduser()
    repo = Path(__file__).resolve().parents[2]
    return repo.parent / "shared" / "eval" / "human-eval-infilling"


def resolve_data(spec: str, data_dir: str | Path | None = None) -> Path:
    """A path, or a short name (single-line, multi-line, random-span, random-span-light) looked up in
    `data_dir` (default: default_data_dir())."""
    if spec in FILES:
        folder = Path(data_dir).expanduser() if data_dir else default_data_dir()
        path = folder / FILES[spec]
        if not data_dir and not os.environ.get(DATA_ENV) and not folder.is_dir():
            # Installed, not a checkout: the default folder beside the repository means nothing
            raise ValueError(f"{spec}: no benchmark folder is set. The files come from {DATA_SOURCE}: "
                             f"download them into a folder and pass --data-dir DIR (or set {DATA_ENV}=DIR), "
                             "or pass one file with --data PATH")
        if not path.is_file():
            raise ValueError(f"{spec}: {FILES[spec]} is not in {folder}. The benchmark files come from "
                             f"{DATA_SOURCE}: download them into a folder and pass --data-dir DIR (or set "
                             f"{DATA_ENV}=DIR), or pass one file with --data PATH")
        return path
    path = Path(spec).expanduser()
    if not path.is_file():
        raise ValueError(f"benchmark file {path} does not exist (or use one of: {', '.join(FILES)})")
    return path


def benchmark_name(path: Path) -> str:
    for name, file in FILES.items():
        if path.name == file:
            return name
    return path.name.split(".")[0]


def load_tasks(path: Path) -> list[Task]:
    opener = gzip.open if str(path).endswith(".gz") else open
    tasks: list[Task] = []
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{n}: not a JSON line: {exc}") from exc
                if not isinstance(rec, dict):
                    raise ValueError(f"{path}:{n}: not a task: a JSON object with {', '.join(REQUIRED)} expected, "
                                     f"not a JSON {JSON_KINDS.get(type(rec), 'value')}")
                missing = [k for k in REQUIRED if not isinstance(rec.get(k), str)]
                if missing:
                    raise ValueError(f"{path}:{n}: task lacks {', '.join(missing)}")
                tasks.append(Task(**{k: rec[k] for k in REQUIRED}))
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read benchmark file {path}: {exc}") from exc
    if not tasks:
        raise ValueError(f"{path} holds no tasks")
    return tasks


def spread_subset(tasks: list[Task], limit: int | None) -> list[Task]:
    """`limit` tasks evenly spaced over the file (the first N would cover only a few problems)."""
    if limit is None or limit >= len(tasks):
        return tasks
    if limit < 1:
        raise ValueError("--limit must be at least 1")
    return [tasks[(i * len(tasks)) // limit] for i in range(limit)]


def spread_order(tasks: list[Task]) -> list[Task]:
    """The tasks reordered so that every prefix is spread over the whole file (indices in
    bit-reversed order): what an evaluation stopped by time (`--max-seconds`) has run is then a
    sample of every problem, not the first few problems' lines."""
    bits = max(1, (len(tasks) - 1).bit_length())
    order = sorted(range(len(tasks)), key=lambda i: int(format(i, f"0{bits}b")[::-1], 2))
    return [tasks[i] for i in order]

