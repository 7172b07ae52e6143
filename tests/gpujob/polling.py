"""Waiting on a job's processes and files from the gpujob tests (polled, never timed)."""
import time


def wait_for(predicate, seconds: float):
    """`predicate()`'s first true value, polled every 0.2 s; AssertionError after `seconds`."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out waiting")
