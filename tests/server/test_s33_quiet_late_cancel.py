"""A $/cancelRequest for a request already answered is routine (editors cancel an inline
completion as the next key is typed, its answer on the way) and leaves no warning in the log:
pygls logged one per keystroke. Real server over stdio."""
from __future__ import annotations

import pytest

from .raw_rpc import RawClient

pytestmark = pytest.mark.timeout(120)


def test_a_late_cancel_is_not_logged(tmp_path, tiny_model_dir):
    client, proc = RawClient.stdio(tmp_path)
    try:
        client.initialize({"model": str(tiny_model_dir), "device": "cpu"})
        assert client.wait_loaded()["loaded"]
        client.open("file:///late/cancel.py")
        msg_id = client.inline("file:///late/cancel.py")
        assert "result" in client.response(msg_id, 60)
        client.cancel(msg_id)                    # its answer came already
        assert client.wait_loaded()["loaded"]    # a round trip: the cancel was handled before it
        client.shutdown_and_exit()
    finally:
        client.close()
        proc.wait(30)
    log = (tmp_path / "server.log").read_text()
    assert "loaded tiny" in log, log
    assert "Cancel notification" not in log, log
