"""How Ray's view of a node becomes a trainmaster node, and which addresses count as loopback (no Ray needed)."""

from __future__ import annotations

from trainmaster.engines.ray.connect import host_of, is_loopback
from trainmaster.engines.ray.nodes import alive_nodes, to_node


def info(node_id: str, *, alive: bool = True, labels: dict[str, str] | None = None, **resources: float) -> dict:
    return {"NodeID": node_id, "Alive": alive, "NodeManagerAddress": "10.0.0.7", "Labels": labels or {},
            "Resources": resources}


def test_resources_labels_and_accelerator_type_make_the_node() -> None:
    found = to_node(info("ab" * 28, CPU=8.0, GPU=2.0, memory=16 * 2**30, **{"accelerator_type:A100": 1.0},
                         labels={"trainmaster.io/node": "gpu-1", "trainmaster.io/zone": "us-b",
                                 "trainmaster.io/transient": "true", "trainmaster.io/price": "1.25",
                                 "ray.io/node-id": "x"}))
    node = found.node
    assert (node.name, node.capacity.cpu, node.capacity.gpu, node.capacity.memory) == ("gpu-1", 8000, 2, 16 * 2**30)
    assert (node.gpu_type, node.zone, node.transient, node.price_per_hour) == ("A100", "us-b", True, 1.25)
    assert dict(node.labels) == {"trainmaster.io/node": "gpu-1", "trainmaster.io/zone": "us-b",
                                 "trainmaster.io/transient": "true", "trainmaster.io/price": "1.25"}
    assert (found.node_id, found.ip) == ("ab" * 28, "10.0.0.7")


def test_a_label_names_the_gpu_type_before_rays_resource_and_defaults_are_sane() -> None:
    labelled = to_node(info("c" * 56, GPU=1.0, **{"accelerator_type:T4": 1.0},
                            labels={"trainmaster.io/gpu-type": "t4-spot", "trainmaster.io/price": "cheap"})).node
    assert labelled.gpu_type == "t4-spot" and labelled.price_per_hour == 0.0  # a bad price is no price
    bare = to_node(info("0123456789" + "f" * 46, CPU=0.5)).node
    assert (bare.name, bare.capacity.cpu, bare.gpu_type, bare.zone, bare.transient) == (
        "ray-01234567", 500, None, "zone-a", False)


def test_only_alive_nodes_count_sorted_by_name() -> None:
    nodes = alive_nodes([info("1" * 56, labels={"trainmaster.io/node": "b"}, CPU=1.0),
                         info("2" * 56, alive=False, labels={"trainmaster.io/node": "c"}, CPU=1.0),
                         info("3" * 56, labels={"trainmaster.io/node": "a"}, CPU=1.0)])
    assert list(nodes) == ["a", "b"]


def test_loopback_addresses() -> None:
    assert host_of("127.0.0.1:6379") == "127.0.0.1" and host_of("ray://head:10001") == "head"
    assert is_loopback("127.0.0.1:6379") and is_loopback("localhost:1") and is_loopback("[::1]:6379")
    assert not is_loopback("10.0.0.2:6379") and not is_loopback(None)


def test_rendezvous_env_from_the_port_answers() -> None:
    from trainmaster.engines.ray.actor import rendezvous_env

    assert rendezvous_env(()) == {}
    assert rendezvous_env((("10.0.0.1", 29500),)) == {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    assert rendezvous_env((("10.0.0.1", 1), ("10.0.0.2", 2), ("10.0.0.3", 3)))["TM_PS_ADDRS"] == "10.0.0.2:2,10.0.0.3:3"


def test_task_ports_come_from_outside_ray_and_ephemeral_ranges() -> None:
    """Rendezvous ports avoid Ray's worker ports and the ephemeral range its processes keep binding."""
    import socket

    from trainmaster.engines.ray.actor import TASK_PORTS, free_port_here

    for _ in range(20):
        _, port = free_port_here()
        assert port in TASK_PORTS and port >= 20000 and port < 32768
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", port))  # free when handed out
