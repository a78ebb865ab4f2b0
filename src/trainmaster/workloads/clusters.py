"""Cluster specs from files and shorthand: one `load_cluster` for every form the CLI accepts.

- shorthand `16x4`, `311x8+2x1`, `4x8:v100` (`core.cluster.parse_shorthand`);
- YAML with a `nodes:` list (`core.cluster.cluster_from_mapping`);
- Tiresias cluster CSVs (`num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node`),
  one node group per row, nodes labelled with their switch;
- the Alibaba PAI machine list (no header: `machine,gpu_type,cap_cpu,cap_mem,cap_gpu`),
  memory in GiB, GPU types lower-cased (`t4`, `p100`, `v100`, `v100m32`, `misc`),
  CPU-only machines without a GPU type.
"""

from __future__ import annotations

import csv
from pathlib import Path

from trainmaster.core.cluster import MAX_NODES, Cluster, cluster_from_mapping, parse_shorthand
from trainmaster.core.errors import SpecError, shown
from trainmaster.core.node import Node
from trainmaster.core.resources import Resources
from trainmaster.core.spec import load_yaml_text

TIRESIAS_COLUMNS = ["num_switch", "num_node_p_switch", "num_gpu_p_node", "num_cpu_p_node", "mem_p_node"]
GIB = 2**30
MAX_CELL = 1_000_000  # switches, nodes, GPUs, CPUs or GiB in one cell


def _rows(path: Path) -> list[list[str]]:
    try:
        with path.open(newline="") as f:
            return [row for row in csv.reader(f) if row and any(cell.strip() for cell in row)]
    except FileNotFoundError:
        raise SpecError(str(path), "file not found", "check the cluster file's path") from None


def _whole(value: str, where: str) -> int:
    try:
        number = int(float(value))
    except (ValueError, OverflowError):  # not a number, or inf
        number = -1
    if not 0 <= number <= MAX_CELL:
        raise SpecError(where, f"{shown(value)} is not a whole number between 0 and {MAX_CELL}", "fix the cell")
    return number


def load_tiresias_cluster(path: Path) -> Cluster:
    """Nodes `s<switch>-n<node>` with the row's GPUs, CPUs and memory (GiB); label `switch`."""
    rows = _rows(Path(path))
    if not rows or [c.strip() for c in rows[0]] != TIRESIAS_COLUMNS:
        raise SpecError(str(path), "is not a Tiresias cluster CSV", f"expected the header {','.join(TIRESIAS_COLUMNS)}")
    nodes: list[Node] = []
    switch_count = 0
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != len(TIRESIAS_COLUMNS):
            raise SpecError(f"{path}:{n}", f"has {len(row)} fields", f"write {len(TIRESIAS_COLUMNS)} numbers")
        switches, per_switch, gpus, cpus, mem = (_whole(v, f"{path}:{n}") for v in row)
        if len(nodes) + switches * per_switch > MAX_NODES:
            raise SpecError(f"{path}:{n}", f"more than {MAX_NODES} nodes in all", "describe a smaller cluster")
        for _ in range(switches):
            switch = f"s{switch_count}"
            switch_count += 1
            for k in range(per_switch):
                nodes.append(
                    Node(
                        name=f"{switch}-n{k}",
                        capacity=Resources(cpu=cpus * 1000, memory=mem * GIB, gpu=gpus),
                        gpu_type="gpu" if gpus else None,
                        labels=(("switch", switch),),
                    )
                )
    if not nodes:
        raise SpecError(str(path), "describes no nodes", "give at least one row with switches and nodes")
    return Cluster(tuple(nodes))


def load_pai_cluster(path: Path, *, gpu_only: bool = False) -> Cluster:
    """Alibaba PAI machines; `gpu_only` drops the machines without GPUs."""
    nodes: list[Node] = []
    for n, row in enumerate(_rows(Path(path)), start=1):
        if len(row) != 5:
            raise SpecError(f"{path}:{n}", f"has {len(row)} fields", "write machine,gpu_type,cap_cpu,cap_mem,cap_gpu")
        name, kind, cpu, mem, gpu = row
        gpus = _whole(gpu, f"{path}:{n}")
        if gpu_only and gpus == 0:
            continue
        nodes.append(
            Node(
                name=name,
                capacity=Resources(
                    cpu=_whole(cpu, f"{path}:{n}") * 1000, memory=_whole(mem, f"{path}:{n}") * GIB, gpu=gpus
                ),
                gpu_type=kind.lower() if gpus and kind.upper() != "CPU" else None,
            )
        )
    if not nodes:
        raise SpecError(str(path), "lists no machines", "pass alibaba-pai/pai_machine_spec.csv")
    return Cluster(tuple(nodes))


def _looks_like_path(text: str) -> bool:
    return "/" in text or text.endswith((".yaml", ".yml", ".csv", ".json"))


def load_cluster(text: str) -> Cluster:
    """A cluster from shorthand, or from a YAML / Tiresias CSV / Alibaba PAI CSV file (detected by content)."""
    path = Path(text)
    if not path.is_file():
        if _looks_like_path(text):
            raise SpecError("cluster", f"{text}: file not found", "check the path, or write a shorthand like 16x4")
        return parse_shorthand(text)
    if path.suffix in (".yaml", ".yml", ".json"):
        return cluster_from_mapping(load_yaml_text(path.read_text(), str(path)), where=str(path))
    first = _rows(path)[:1]
    if first and [c.strip() for c in first[0]] == TIRESIAS_COLUMNS:
        return load_tiresias_cluster(path)
    if first and len(first[0]) == 5:
        return load_pai_cluster(path)
    raise SpecError(
        str(path),
        "is not a cluster file I know",
        "use YAML with nodes:, a Tiresias cluster CSV or the Alibaba PAI machine list",
    )
