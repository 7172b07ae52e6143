"""A front whose Ray cluster went and came back (a head node restarted at the same address, the
deployment made again) serves again on the same connection: its driver session and handle stayed
bound to the cluster that had gone, and every request waited 120 s for "no answer" for good."""
import asyncio

import pytest

from tests.server.lsp_harness import inline_params, open_doc
from tests.serving import test_ray_serve
from tests.serving.test_ray_serve import TEXT, URI, deploy_tiny, start_front, stop_front

pytestmark = pytest.mark.timeout(900)
cluster = test_ray_serve.cluster      # the real loopback cluster, started and stopped for this module


async def test_a_front_serves_again_once_its_cluster_is_back(cluster, tiny_model_dir, tmp_path):
    deploy_tiny(cluster, tiny_model_dir)
    client, _, _ = await start_front(tmp_path, "--ray", cluster.address, env=cluster.env)
    try:
        open_doc(client, URI, TEXT)
        assert await client.text_document_inline_completion_async(inline_params(URI, 1, 11)) is not None
        address = cluster.address
        cluster.stop()
        with pytest.raises(Exception) as caught:
            await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 60)
        assert getattr(caught.value, "code", None) == -32803 and "is gone" in str(caught.value), caught.value
        cluster.restart()
        assert cluster.address == address
        cluster.deployed_tiny = False
        deploy_tiny(cluster, tiny_model_dir)
        # 130 s: above the front's 120 s request timeout, so the old failure shows as its own error.
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 130)
        assert answer is not None and answer.items
    finally:
        await stop_front(client)
