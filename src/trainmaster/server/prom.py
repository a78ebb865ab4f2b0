"""Prometheus metrics for `/metrics`: read at scrape time from the store and the daemon's views.

Nothing here locks the controller: job counts, pending times and the
restart/resize/preemption counters come from the store's job rows, capacity
and allocation from the node view the daemon thread republishes. The one
thing measured inside the loop is decision latency: `DecisionTimer` wraps the
policy, times each `decide`, and adds one sample per phase when the plan
carries `timings` (phase -> seconds).
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client import Counter as CounterMetric
from prometheus_client import Histogram as HistogramMetric
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from trainmaster.controller.records import JobRecord
from trainmaster.policies.snapshot import Plan, Policy, Snapshot
from trainmaster.server.daemon import Daemon

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PENDING_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)
DECISION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
WHOLE = "total"  # the `phase` label of a whole decision


class DecisionTimer:
    """A Policy that times each decision of the one it wraps; everything else passes through."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name
        self.decisions = CounterMetric("trainmaster_decisions", "Scheduling decisions (policy cycles) made",
                                       registry=None)
        self.latency = HistogramMetric("trainmaster_decision_duration_seconds",
                                       f"Time of one scheduling decision (phase={WHOLE}) and of each phase",
                                       ["phase"], registry=None, buckets=DECISION_BUCKETS)

    @property
    def interval(self) -> float | None:  # read live: some policies (tiresias) change it every decision
        return self.inner.interval

    @interval.setter
    def interval(self, value: float | None) -> None:
        self.inner.interval = value

    def __getattr__(self, name: str) -> Any:  # uses_models and other optional policy attributes
        return getattr(self.inner, name)

    def decide(self, snapshot: Snapshot) -> Plan:
        start = time.perf_counter()
        plan = self.inner.decide(snapshot)
        self.latency.labels(phase=WHOLE).observe(time.perf_counter() - start)
        timings: Mapping[str, float] = getattr(plan, "timings", None) or {}
        for phase, seconds in timings.items():
            self.latency.labels(phase=phase).observe(seconds)
        self.decisions.inc()
        return plan


def install_timer(daemon: Daemon) -> DecisionTimer:
    """Wrap the daemon controller's policy once (a reference swap the controller thread reads next cycle)."""
    policy = daemon.controller.policy
    if isinstance(policy, DecisionTimer):
        return policy
    timer = DecisionTimer(policy)
    daemon.controller.policy = timer
    return timer


class GpuSeconds:
    """A controller `UsageListener`: GPU-seconds allocated since the daemon started (GPUs in use x time)."""

    def __init__(self, now: float, used_gpus: int) -> None:
        self._state = (now, used_gpus, 0.0)  # (time of the last change, GPUs in use since, GPU-seconds before it)

    def allocated(self, t: float, record: JobRecord, used_gpus: int) -> None:
        at, used, total = self._state
        self._state = (t, used_gpus, total + used * max(0.0, t - at))  # one swap: a scrape reads it whole

    def capacity_changed(self, t: float, gpus: int) -> None:
        pass

    def total(self, now: float) -> float:
        at, used, total = self._state
        return total + used * max(0.0, now - at)


def _node_labels(node: Mapping[str, Any]) -> tuple[str, str]:
    return (str(node.get("gpu_type") or "cpu"), "transient" if node.get("transient") else "on-demand")


class DaemonCollector(Collector):
    """Builds every family from the store and views at each scrape."""

    def __init__(self, daemon: Daemon, timer: DecisionTimer, gpu_seconds: GpuSeconds | None = None) -> None:
        self.daemon = daemon
        self.timer = timer
        self.gpu_seconds = gpu_seconds
        self._lock = threading.Lock()
        self._nodes_seen: set[str] = set()
        self.lost = 0

    def _nodes_lost(self, names: set[str]) -> int:
        """Nodes that left the view since the daemon started (revocations, failures)."""
        with self._lock:
            self.lost += len(self._nodes_seen - names)
            self._nodes_seen = names
            return self.lost

    def collect(self) -> Iterable[Metric]:
        rows = self.daemon.store.jobs()
        yield from _job_families(rows, self.daemon.controller.clock.now())
        nodes = list(self.daemon.nodes_view)
        yield from _node_families(nodes)
        lost = self._nodes_lost({str(n["name"]) for n in nodes})
        revocations = CounterMetricFamily("trainmaster_node_revocations",
                                          "Nodes lost (transient revocations, failures) since the daemon started")
        revocations.add_metric([], lost)
        yield revocations
        if self.gpu_seconds is not None:
            gpu_time = CounterMetricFamily("trainmaster_gpu_allocated_seconds",
                                           "GPU-seconds held by tasks since the daemon started")
            gpu_time.add_metric([], self.gpu_seconds.total(self.daemon.controller.clock.now()))
            yield gpu_time
        yield from self.timer.decisions.collect()
        yield from self.timer.latency.collect()


def _job_families(rows: list[dict[str, Any]], now: float) -> Iterable[Metric]:
    by_state: Counter[tuple[str, str]] = Counter((r["state"], r["queue"]) for r in rows)
    jobs = GaugeMetricFamily("trainmaster_jobs", "Jobs in the store by state and queue", labels=["state", "queue"])
    for (state, queue), n in sorted(by_state.items()):
        jobs.add_metric([state, queue], n)
    yield jobs

    waits = sorted(r["first_start"] - r["submit_time"] for r in rows if r["first_start"] is not None)
    buckets, i = [], 0
    for bound in PENDING_BUCKETS:
        while i < len(waits) and waits[i] <= bound:
            i += 1
        buckets.append((repr(float(bound)), float(i)))  # "60.0": the `le` label as prometheus_client writes it
    buckets.append(("+Inf", float(len(waits))))
    pending = HistogramMetricFamily("trainmaster_job_pending_seconds",
                                    "Time from submit to first start of the jobs that have started")
    pending.add_metric([], buckets, sum_value=math.fsum(waits))
    yield pending

    oldest = min((r["submit_time"] for r in rows if r["state"] == "pending"), default=None)
    waiting = GaugeMetricFamily("trainmaster_oldest_pending_job_age_seconds",
                                "How long the oldest pending job has waited (0 when none waits)")
    waiting.add_metric([], 0.0 if oldest is None else max(0.0, now - oldest))
    yield waiting

    counters = {"restarts": "Job restarts after failures", "resizes": "Job resizes (elastic grow or shrink)",
                "preemptions": "Job preemptions"}
    for column, help_text in counters.items():
        family = CounterMetricFamily(f"trainmaster_job_{column}", help_text, labels=["queue"])
        totals: Counter[str] = Counter()
        for r in rows:
            totals[r["queue"]] += int(r.get(column) or 0)  # 0 until the store has the column
        for queue, n in sorted(totals.items()):
            family.add_metric([queue], n)
        yield family

    cost = CounterMetricFamily("trainmaster_cost_dollars", "Cost of the jobs' resources (0 until costs are known)")
    cost.add_metric([], math.fsum(float(r.get("cost") or 0.0) for r in rows))
    yield cost


def _node_families(nodes: list[Mapping[str, Any]]) -> Iterable[Metric]:
    labels = ["node_type", "capacity_type"]
    count = GaugeMetricFamily("trainmaster_nodes", "Nodes by GPU type and capacity type", labels=labels)
    gauges = {
        ("gpu", "capacity"): GaugeMetricFamily("trainmaster_gpus_capacity", "GPUs on the nodes", labels=labels),
        ("gpu", "allocated"): GaugeMetricFamily("trainmaster_gpus_allocated", "GPUs held by tasks", labels=labels),
        ("cpu", "capacity"): GaugeMetricFamily("trainmaster_cpu_cores_capacity", "CPU cores on the nodes",
                                               labels=labels),
        ("cpu", "allocated"): GaugeMetricFamily("trainmaster_cpu_cores_allocated", "CPU cores held by tasks",
                                                labels=labels),
    }
    sums: dict[tuple[str, str], dict[tuple[str, str], float]] = {key: {} for key in gauges}
    nodes_by: Counter[tuple[str, str]] = Counter()
    for node in nodes:
        key = _node_labels(node)
        nodes_by[key] += 1
        for kind in ("gpu", "cpu"):
            cap, free = float(node["capacity"][kind]), float(node["free"][kind])
            sums[(kind, "capacity")][key] = sums[(kind, "capacity")].get(key, 0.0) + cap
            sums[(kind, "allocated")][key] = sums[(kind, "allocated")].get(key, 0.0) + cap - free
    for key, n in sorted(nodes_by.items()):
        count.add_metric(list(key), n)
    yield count
    for name, family in gauges.items():
        for key, value in sorted(sums[name].items()):
            family.add_metric(list(key), round(value, 6))
        yield family


def registry_for(daemon: Daemon) -> CollectorRegistry:
    """A registry of this daemon's metrics (one per app: tests run several daemons in one process)."""
    registry = CollectorRegistry(auto_describe=False)
    gpu_seconds = GpuSeconds(daemon.controller.clock.now(), daemon.controller.used_gpus)
    daemon.controller.usage_listeners.append(gpu_seconds)
    registry.register(DaemonCollector(daemon, install_timer(daemon), gpu_seconds))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
