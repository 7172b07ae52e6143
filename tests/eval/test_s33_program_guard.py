"""A benchmark program runs guarded: it cannot change anything outside its own folder, start or
signal processes, or run on once its evaluator is gone or interrupted."""
import glob
import os
import signal
import subprocess
import sys
import time

import pytest

from dllm_lsp.eval.execution import run_program, run_programs


@pytest.mark.parametrize("action", [
    "import shutil\nshutil.rmtree({folder!r})\n",
    "import os\nos.remove({file!r})\n",
    "import os\nos.rename({file!r}, {file!r} + '.moved')\n",
    "open({file!r}, 'w').write('overwritten')\n",
    "import pathlib\npathlib.Path({file!r}).write_text('overwritten')\n",
    "import os\nos.chmod({file!r}, 0)\n",
    "import os\nos.truncate({file!r}, 0)\n",
])
def test_a_program_cannot_change_files_outside_its_folder(tmp_path, action):
    folder = tmp_path / "precious"
    folder.mkdir()
    (folder / "keep.txt").write_text("keep")
    outcome = run_program(action.format(folder=str(folder), file=str(folder / "keep.txt")), 10)
    assert not outcome.passed and "PermissionError" in outcome.reason, outcome
    assert sorted(os.listdir(folder)) == ["keep.txt"] and (folder / "keep.txt").read_text() == "keep"
    assert os.stat(folder / "keep.txt").st_mode & 0o600 == 0o600


@pytest.mark.parametrize("start", [
    "import os\nos.system('touch {marker}')\n",
    "import subprocess\nsubprocess.Popen(['touch', {marker!r}]).wait()\n",
    "import subprocess, sys\nsubprocess.run([sys.executable, '-c', {code!r}])\n",
    "import os\nif os.fork() == 0:\n    open({marker!r}, 'w')\n    os._exit(0)\nos.wait()\n",
    "import os\nos.kill(os.getppid(), 0)\n",
])
def test_a_program_cannot_start_or_signal_processes(tmp_path, start):
    marker = tmp_path / "ran"
    outcome = run_program(start.format(marker=str(marker), code=f"open({str(marker)!r}, 'w')"), 10)
    assert not outcome.passed and "PermissionError" in outcome.reason and "is not allowed" in outcome.reason, outcome
    assert not marker.exists()


def test_its_own_folder_and_temporary_files_stay_open_to_it():
    program = ("import os, tempfile, shutil\n"
               "open('out.txt', 'w').write('x')\nos.rename('out.txt', 'moved.txt')\nos.mkdir('d')\n"
               "shutil.rmtree('d')\nos.remove('moved.txt')\n"
               "with tempfile.NamedTemporaryFile('w') as fh:\n    fh.write('x')\n"
               "with tempfile.TemporaryDirectory() as d:\n    open(os.path.join(d, 'f'), 'w').write('x')\n")
    assert run_program(program, 10).passed


SPIN = "import os\nopen('pid', 'w').write(str(os.getpid()))\nwhile True:\n    pass\n"


def evaluator(tmp_path, timeout: float) -> subprocess.Popen:
    """`run_programs` of two spinning programs in a process of its own, its programs' folders in tmp_path."""
    # Ctrl-C raises KeyboardInterrupt there even when this test runs with SIGINT ignored (a shell's
    # background job: its children start with it ignored, and Python then installs no handler).
    script = (f"import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
              f"from dllm_lsp.eval.execution import run_programs\n"
              f"run_programs([{SPIN!r}] * 2, {timeout}, 2)\n")
    return subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "TMPDIR": str(tmp_path)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def program_pids(tmp_path, count: int) -> list[int]:
    """The pids the spinning programs wrote in their folders, once `count` have."""
    for _ in range(600):
        files = glob.glob(str(tmp_path / "dllm-eval-*" / "work" / "pid"))
        pids = [int(text) for f in files if (text := open(f).read())]
        if len(pids) >= count:
            return pids
        time.sleep(0.1)
    raise AssertionError(f"the programs did not start: {files}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:      # a zombie has ended; only its parent has not reaped it
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_an_interrupted_evaluation_ends_its_programs_at_once(tmp_path):
    """Ctrl-C had waited out every running program's timeout (here 600 s) before it took effect."""
    proc = evaluator(tmp_path, 600)
    try:
        pids = program_pids(tmp_path, 2)
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            raise AssertionError("the interrupted evaluation waited for its programs' 600 s timeout") from None
        assert "KeyboardInterrupt" in err
        assert not any(alive(pid) for pid in pids)
    finally:
        proc.kill()
        for pid in program_pids(tmp_path, 0):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_program_whose_evaluator_was_killed_ends_by_itself(tmp_path):
    """SIGKILL gives the evaluator no chance to end its programs' groups: a looping program spun on
    for good (a session of its own, out of reach of the terminal); its CPU cap now ends it."""
    proc = evaluator(tmp_path, 1)
    pids = []
    try:
        pids = program_pids(tmp_path, 1)
        proc.kill()
        proc.wait()
        for _ in range(1200):      # 2 s of CPU each; a loaded machine gives it slowly
            if not any(alive(pid) for pid in pids):
                break
            time.sleep(0.1)
        assert not any(alive(pid) for pid in pids), "a program outlived its evaluator by its CPU cap and more"
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_canonical_programs_pass_under_the_guard():
    """What the guard refuses, no HumanEval program does (every file's first task of each problem
    passed with its reference middle: script observation, 656 programs)."""
    from dllm_lsp.eval.tasks import Task

    task = Task("T/0", "import math, re, hashlib\ndef f(x):\n    return ", "\n",
                "hashlib.md5(str(math.floor(x)).encode()).hexdigest()[:2] + re.sub('a', 'b', 'a')",
                "def check(f):\n    assert f(1.5) == 'c4b'\n", "f")
    assert run_programs([task.program(task.canonical_solution)], 10, 1)[0].passed
