"""The autoscaler on the Ray engine: it starts a Ray node for a job that waits for room and stops it when idle.

A real Ray cluster on this machine (`ray.cluster_utils.Cluster`): a head with
one CPU; a job needs two. The controller's autoscaler asks the `RayProvider`
for a node of the `big` type; Ray starts it with trainmaster's labels, the Ray
engine's node watch reports it, the job runs there and ends, and two seconds
idle later the node is stopped and reported lost. No timing is asserted: the
deadlines only turn a hang into a failure.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from trainmaster.controller.autoscale import Autoscaler  # noqa: E402
from trainmaster.controller.loop import Controller  # noqa: E402
from trainmaster.core.events import NodeAdded, NodeLost  # noqa: E402
from trainmaster.core.market import autoscale_from_mapping  # noqa: E402
from trainmaster.core.spec import job_from_mapping  # noqa: E402
from trainmaster.core.states import JobState  # noqa: E402
from trainmaster.engines.ray.engine import RayEngine  # noqa: E402
from trainmaster.engines.ray.localcluster import local_ray_cluster  # noqa: E402
from trainmaster.engines.ray.provider import RayProvider  # noqa: E402
from trainmaster.policies.registry import make_policy  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
ROOT = Path(__file__).resolve().parents[1]


def test_the_autoscaler_starts_a_ray_node_for_a_waiting_job_and_stops_it_when_idle(tmp_path: Path) -> None:
    with local_ray_cluster(1, cpus=1) as cluster:
        engine = RayEngine(run_dir=tmp_path / "run", address=cluster.address, base_dir=ROOT, grace=10,
                           namespace=f"tm-{uuid.uuid4().hex[:8]}", node_poll=0.2)
        try:
            seen: list[object] = []
            original = engine.wait

            def wait(timeout: float | None) -> list[object]:
                events = original(timeout)
                seen.extend(events)
                return events  # type: ignore[return-value]

            engine.wait = wait  # type: ignore[method-assign,assignment]
            controller = Controller(engine, make_policy("fifo"))
            spec = autoscale_from_mapping({"autoscale": {"idleTimeout": 2, "nodeTypes": [
                {"name": "big", "gpu": 0, "cpu": 2, "memory": "1Gi", "onDemandPrice": 0.5, "maxOnDemand": 1}]}})
            scaler = Autoscaler(spec, RayProvider(cluster, node_ip_address="127.0.0.1",
                                                  object_store_memory=80 * 2**20)).attach(controller)
            job = job_from_mapping({"apiVersion": "trainmaster/v1", "kind": "TrainingJob", "metadata": {"name": "wide"},
                                    "spec": {"command": ["sh", "-c", "echo ran on $TM_NODE"],
                                             "roles": {"worker": {"min": 1, "resources": {"cpu": "2"}}}}})
            jid = controller.submit(job)
            deadline = time.monotonic() + 240
            while not any(isinstance(e, NodeLost) for e in seen):
                assert time.monotonic() < deadline, (controller.jobs[jid].state, seen[-5:])
                controller.step(max_wait=0.2)
            record = controller.jobs[jid]
            assert record.state is JobState.SUCCEEDED, record.message
            assert any("big-d1" in text for _, text in record.decisions), record.decisions  # it ran on the new node
            added = [e for e in seen if isinstance(e, NodeAdded)]
            assert [e.node.name for e in added] == ["big-d1"] and added[0].node.capacity.cpu == 2000  # type: ignore[attr-defined]
            assert [e.node for e in seen if isinstance(e, NodeLost)] == ["big-d1"]  # type: ignore[attr-defined]
            assert scaler.added == 1 and scaler.removed == 1
            assert [n.name for n in controller.cluster.nodes] == ["n0"]
            assert "big-d1" not in {str(n["Labels"].get("trainmaster.io/node")) for n in ray.nodes() if n["Alive"]}
        finally:
            engine.close(grace=0)
