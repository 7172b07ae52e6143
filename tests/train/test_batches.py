"""Training batches: a parsed file serves several examples, and the mix of files stays the one
the size weights give."""
import os
from collections import Counter

import pytest
from torch.utils.data import get_worker_info

from dllm_lsp.arch.tiny import sample_corpus
from dllm_lsp.train import data
from dllm_lsp.train.data import SpanBatches, TrainBatches
from dllm_lsp.train.examples import LayoutOptions


@pytest.fixture
def counted(monkeypatch):
    """The real parse and example builder, counted: parses, and examples by source file."""
    counts = {"parses": 0, "examples": Counter()}
    analyse, sample = data.FileSpans.analyse, data.sample_example

    def counting_analyse(text, language):
        counts["parses"] += 1
        return analyse(text, language)

    def counting_sample(fs, *args, **kwargs):
        ex = sample(fs, *args, **kwargs)
        if ex is not None:
            counts["examples"][len(fs.data)] += 1
        return ex

    monkeypatch.setattr(data.FileSpans, "analyse", staticmethod(counting_analyse))
    monkeypatch.setattr(data, "sample_example", counting_sample)
    return counts


def files() -> list[tuple[str, str]]:
    texts = sorted(sample_corpus(), key=len)
    return [(texts[-1], "python"), (texts[len(texts) // 2], "python")]   # sizes apart, weights apart


def draw(dataset: SpanBatches, batches: int) -> None:
    it = iter(dataset)
    for _ in range(batches):
        ids, is_span, ar = next(it)
        assert ids.shape == (dataset.batch_size, dataset.opts.seq_len) == is_span.shape == ar.shape


@pytest.mark.parametrize("uses", [1.0, 8.0])
def test_each_parsed_file_serves_about_uses_per_file_examples(counted, small_tokenizer_path, uses):
    ds = SpanBatches(files(), str(small_tokenizer_path), 1, 16, LayoutOptions(seq_len=128, max_slot=32),
                     seed=5, pool_files=64, uses_per_file=uses)
    draw(ds, 40)
    examples = sum(counted["examples"].values())
    assert examples >= 640
    # A draw that yields no example (spans that do not fit) is retried on the same kind of draw.
    per_parse = examples / counted["parses"]
    if uses == 1.0:
        assert per_parse <= 1.0
    else:
        assert uses / 2 <= per_parse <= uses * 1.5


def test_reusing_parsed_files_keeps_the_mix_of_files(counted, small_tokenizer_path):
    shares = []
    for uses in (1.0, 8.0):
        counted["examples"].clear()
        ds = SpanBatches(files(), str(small_tokenizer_path), 1, 16, LayoutOptions(seq_len=128, max_slot=32),
                         seed=1, pool_files=16, uses_per_file=uses)
        draw(ds, 150)
        big = max(counted["examples"])
        shares.append(counted["examples"][big] / sum(counted["examples"].values()))
    # The pool's composition wanders (it is an urn): at this length, seeds vary by about 0.03.
    assert abs(shares[0] - shares[1]) < 0.07, shares


def test_uses_per_file_below_one_is_refused(small_tokenizer_path):
    with pytest.raises(ValueError, match="uses_per_file"):
        SpanBatches(files(), str(small_tokenizer_path), 1, 4, LayoutOptions(seq_len=128), uses_per_file=0.5)


class DiesInWorkers(SpanBatches):
    """Real batches in this process; a worker process that starts on it dies at once (what a
    full /dev/shm or the OOM killer does to a DataLoader worker)."""

    def __iter__(self):
        if get_worker_info() is not None:
            os._exit(3)
        return super().__iter__()


def test_training_goes_on_in_process_when_the_data_workers_die(small_tokenizer_path):
    ds = DiesInWorkers(files(), str(small_tokenizer_path), 1, 4, LayoutOptions(seq_len=128, max_slot=32), seed=2)
    said = []
    batches = TrainBatches(ds, workers=2, pin_memory=False, log=said.append)
    for _ in range(3):
        ids, is_span, ar = next(batches)
        assert ids.shape == (4, 128)
    assert batches.fallback is not None and "exited unexpectedly" in batches.fallback
    assert len(said) == 1 and "workers failed" in said[0]


def test_workers_that_live_are_used(small_tokenizer_path):
    ds = SpanBatches(files(), str(small_tokenizer_path), 1, 4, LayoutOptions(seq_len=128, max_slot=32), seed=2)
    batches = TrainBatches(ds, workers=1, pin_memory=False)
    assert next(batches)[0].shape == (4, 128) and batches.fallback is None


def test_workers_are_fewer_when_their_queued_batches_would_not_fit_in_shm(small_tokenizer_path, tmp_path):
    said = []
    small = SpanBatches(files(), str(small_tokenizer_path), 1, 4, LayoutOptions(seq_len=128, max_slot=32))
    assert TrainBatches(small, 3, False, log=said.append, shm=str(tmp_path)).workers == 3 and not said
    # Batches far larger than the free space (never built: only their size is reckoned).
    huge = SpanBatches(files(), str(small_tokenizer_path), 1, 10**12, LayoutOptions(seq_len=128, max_slot=32))
    assert TrainBatches(huge, 3, False, log=said.append, shm=str(tmp_path)).workers == 0
    assert len(said) == 1 and "0 data workers instead of 3" in said[0]
