"""Ground truth for parameter-server jobs in the simulator, and a generator of PS workloads.

Speed follows Optimus' laws (Peng et al., EuroSys'18, eqs. 3-4), with
coefficients derived from each model's size and compute:

- synchronous, seconds per step `t0*M/w + t1 + t2*w/p + t3*w + t4*p`
- asynchronous, `f = w / (t0*m + t1*w/p + t2*w + t3*p)` with local batch m

Sources of the numbers:

- parameters and forward GFLOPs per 224x224 (299 for Inception-v3) sample: the torchvision model
  zoo's table (pytorch.org/vision/stable/models.html): ResNet-50 25,557,032 / 4.09,
  VGG-16 138,357,544 / 15.47, Inception-v3 27,161,264 / 5.71, AlexNet 61,100,840 / 0.71,
  GoogLeNet 6,624,904 / 1.50, ResNeXt-50 32x4d 25,028,904 / 4.23. Optimus' evaluation used
  ResNet-50, VGG-16, Inception-BN, ResNeXt, and others; these are their public counterparts.
- compute: forward + backward = 3x forward FLOPs; effective device speed 3.5 TFLOP/s, chosen so
  ResNet-50's compute at batch 64 takes 1/4.4 s, the step rate Gavel measured on one V100
  (`gavel/simulation_throughputs.json`).
- network: 10 Gbit/s (1.25 GB/s) per machine, an assumption matching common PS testbeds; fp32
  parameters (4 bytes). Each step a worker pushes gradients and pulls parameters (2x the model);
  a server holding 1/p of the model exchanges 2*S/p bytes with each of w workers.
- per-step framework overhead 20 ms, 2 ms per worker at the barrier, 5 ms per server
  connection: assumptions, small next to the terms above.

Loss follows `1/(b0*k + b1) + b2` (Optimus' convergence model) from an initial loss `ln(classes)`
to a final loss, with 2% minibatch noise around it (seeded per job and step); the engine may add
reporting noise on top (`SimConfig.loss_noise`). The job ends where the noise-free curve meets
its target.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from trainmaster.core.allocation import Allocation
from trainmaster.core.cluster import Cluster
from trainmaster.core.job import Architecture, JobSpec, Role, RoleSpec, Target
from trainmaster.core.resources import Resources
from trainmaster.workloads.base import Workload, WorkloadJob

DEVICE_FLOPS = 3.5e12  # effective FLOP/s of one worker's GPU (calibrated to Gavel's V100 ResNet-50)
NETWORK_BPS = 1.25e9  # bytes/s per machine (10 Gbit/s)
OVERHEAD_S = 0.020
PER_WORKER_S = 0.002
PER_PS_S = 0.005


@dataclass(frozen=True, slots=True)
class PSModel:
    """A model's size and compute: all the speed law needs."""

    name: str
    params: int  # parameters (torchvision)
    gflops: float  # forward GFLOPs per sample (torchvision)
    classes: int = 1000

    @property
    def bytes(self) -> float:
        return 4.0 * self.params

    @property
    def seconds_per_sample(self) -> float:
        return 3.0 * self.gflops * 1e9 / DEVICE_FLOPS


MODELS: dict[str, PSModel] = {m.name: m for m in (
    PSModel("resnet-50", 25_557_032, 4.09),
    PSModel("vgg-16", 138_357_544, 15.47),
    PSModel("inception-v3", 27_161_264, 5.71),
    PSModel("alexnet", 61_100_840, 0.71),
    PSModel("googlenet", 6_624_904, 1.50),
    PSModel("resnext-50", 25_028_904, 4.23),
)}


def sync_coefficients(model: PSModel) -> tuple[float, float, float, float, float]:
    """(t0..t4) of the synchronous law for this model."""
    transfer = 2.0 * model.bytes / NETWORK_BPS
    return (model.seconds_per_sample, OVERHEAD_S + transfer, transfer, PER_WORKER_S, PER_PS_S)


@dataclass(frozen=True)
class PSTruth:
    """How one PS job really runs: the Optimus law for its model, and its loss curve."""

    model: PSModel
    batch: int  # global batch M (synchronous) or per-worker batch (asynchronous)
    sync: bool
    b0: float
    b1: float
    b2: float
    steps: float  # steps to the target
    noise: float = 0.02  # relative std-dev of the loss around the curve (minibatch noise)
    seed: int = 0

    @property
    def total_steps(self) -> float:
        return self.steps

    def speed(self, workers: int, ps: int) -> float:
        """True steps/s with `workers` workers and `ps` servers (0 without both)."""
        if workers <= 0 or ps <= 0:
            return 0.0
        t0, t1, t2, t3, t4 = sync_coefficients(self.model)
        if self.sync:
            return 1.0 / (t0 * self.batch / workers + t1 + t2 * workers / ps + t3 * workers + t4 * ps)
        return workers / (t0 * self.batch + t1 + t2 * workers / ps + t3 * workers + t4 * ps)

    def steps_per_second(self, alloc: Allocation, spec: JobSpec, cluster: Cluster | None = None) -> float:
        return self.speed(alloc.count(Role.WORKER), alloc.count(Role.PS))

    def loss(self, step: float) -> float | None:
        """The curve at `step` with its noise, the same for the same step (reproducible without RNG state)."""
        clean = 1.0 / (self.b0 * step + self.b1) + self.b2
        if not self.noise:
            return clean
        wiggle = random.Random(self.seed * 1_000_003 + int(step)).gauss(0.0, self.noise)
        return clean * max(0.5, 1.0 + wiggle)


def ps_job(name: str, model: PSModel, *, batch: int, sync: bool, steps: float, max_workers: int = 8,
           max_ps: int = 8, final_loss: float = 0.5, noise: float = 0.02, seed: int = 0) -> tuple[JobSpec, PSTruth]:
    """A PS job whose (noise-free) loss reaches `1.05 * final_loss` after `steps` steps; its target is that loss."""
    initial = math.log(model.classes)
    b1 = 1.0 / (initial - final_loss)
    target = 1.05 * final_loss
    b0 = (1.0 / (target - final_loss) - b1) / steps
    truth = PSTruth(model=model, batch=batch, sync=sync, b0=b0, b1=b1, b2=final_loss, steps=steps, noise=noise,
                    seed=seed)
    spec = JobSpec(
        name=name,
        roles={
            Role.WORKER: RoleSpec(min=1, max=max_workers, resources=Resources(cpu=4000, memory=16 * 2**30, gpu=1)),
            Role.PS: RoleSpec(min=1, max=max_ps, resources=Resources(cpu=4000, memory=16 * 2**30)),
        },
        architecture=Architecture.PARAMETER_SERVER,
        target=Target(loss=target),
        job_type=model.name,
        labels=(("batch_size", str(batch)), ("sync", "sync" if sync else "async")),
    )
    return spec, truth


def ps_workload(jobs: int, *, rate_per_hour: float = 20.0, seed: int = 0, async_share: float = 0.2) -> Workload:
    """`jobs` PS jobs of the models above, Poisson arrivals; 10^U(3, 4.3) steps each. Seeded."""
    rng = random.Random(seed)
    names = sorted(MODELS)
    t = 0.0
    out = []
    for i in range(jobs):
        t += rng.expovariate(rate_per_hour / 3600.0)
        model = MODELS[rng.choice(names)]
        sync = rng.random() >= async_share
        batch = rng.choice((128, 256, 512)) if sync else rng.choice((32, 64))
        steps = round(10 ** rng.uniform(3.0, 4.3))
        spec, truth = ps_job(f"ps-{i}", model, batch=batch, sync=sync, steps=steps,
                             final_loss=round(rng.uniform(0.3, 1.2), 3), seed=seed * 100_003 + i)
        out.append(WorkloadJob(job_id=f"ps-{i}", submit_time=round(t, 3), spec=spec, truth=truth))
    return Workload(name=f"ps-{jobs}-seed{seed}", jobs=tuple(out))
