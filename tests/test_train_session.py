"""`trainmaster.train`: env, progress reports, SIGTERM -> checkpoint and exit 75, resume, PS updates."""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from trainmaster.train import EXIT_PREEMPTED, ParameterClient, Session, TaskEnv, load, serve, split_parameters
from trainmaster.train.report import Reporter


def test_env_defaults_and_parsing() -> None:
    env = TaskEnv.from_env({"RANK": "1", "WORLD_SIZE": "3", "TM_ROLE": "worker", "TM_PS_ADDRS": "h:1,h:2",
                            "TM_CHECKPOINT_EVERY": "2.5", "TM_BATCH_MODE": "per-worker"})
    assert (env.rank, env.world_size, env.index, env.is_chief) == (1, 3, 1, False)
    assert env.ps_addrs == ("h:1", "h:2") and env.checkpoint_every == 2.5
    assert TaskEnv.from_env({}).is_chief
    with pytest.raises(ValueError, match="RANK"):
        TaskEnv.from_env({"RANK": "one"})


def test_local_batch_keeps_or_scales_the_global_batch() -> None:
    assert TaskEnv(world_size=3).local_batch_size(64) == 22  # ceil(64 / 3): the global batch is kept
    assert TaskEnv(world_size=3, batch_mode="per-worker").local_batch_size(64) == 64
    assert Session(TaskEnv(world_size=1)).local_batch_size(64) == 64


def test_reporter_aggregates_and_batches_writes(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    rep = Reporter(str(path), attempt=4, world_size=2, interval=3600, resolution=3600)
    rep.report(1, loss=2.0, samples=8)  # the first report is written at once
    for step in range(2, 50):
        rep.report(step, loss=1.0 if step % 2 else 3.0, samples=8)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) == 1 and lines[0] == {**lines[0], "step": 1, "loss": 2.0, "attempt": 4, "world": 2}
    rep.report(50, checkpoint=1.0)  # a marker closes the group at once, without loss
    rep.close()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(x["step"], x.get("loss"), x.get("samples")) for x in lines] == [(1, 2.0, 8), (50, 2.0, 384)]
    assert lines[-1]["checkpoint"] == 1.0


def test_a_loss_tensor_is_read_once_per_line_not_per_step(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    rep = Reporter(str(path), interval=3600, resolution=3600)
    rep.report(1, loss=torch.tensor(4.0))
    for step in range(2, 10):
        rep.report(step, loss=torch.tensor(float(step), requires_grad=True) * 1.0)  # a graph output, as in training
    rep.close()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(x["step"], x["loss"]) for x in lines] == [(1, 4.0), (9, 9.0)]  # the group's last value


_LOOP = textwrap.dedent("""
    import time, torch
    import trainmaster.train as tm
    s = tm.init()
    w = torch.zeros(1)
    state = s.restore()
    if state is not None:
        w = state["w"]
    print("START", s.start_step, flush=True)
    for step in s.steps(100000, state=lambda: {"w": w.clone()}):
        w += 1
        time.sleep(0.01)
        s.report(step + 1, loss=1.0 / (step + 1))
""")


@pytest.mark.slow  # a real process
def test_sigterm_checkpoints_exits_75_and_the_next_run_resumes(tmp_path: Path) -> None:
    env = {**os.environ, "TM_CHECKPOINT_DIR": str(tmp_path / "ck"), "TM_REPORT_FILE": str(tmp_path / "r.jsonl"),
           "TM_CHECKPOINT_EVERY": "3600"}
    proc = subprocess.Popen([sys.executable, "-c", _LOOP], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().split() == ["START", "0"]
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == EXIT_PREEMPTED
    payload = load(tmp_path / "ck")
    assert payload is not None and payload["step"] > 0
    assert float(payload["state"]["w"]) == payload["step"]  # the state as of exactly that step
    lines = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert lines[-1] == {**lines[-1], "step": payload["step"], "checkpoint": 1.0}
    again = subprocess.Popen([sys.executable, "-c", _LOOP], env=env, stdout=subprocess.PIPE, text=True)
    assert again.stdout is not None and again.stdout.readline().split() == ["START", str(payload["step"])]
    again.kill()
    again.wait()


def test_split_parameters_balances_bytes() -> None:
    sizes = [4096, 64, 640, 10, 4000, 50]
    owner = split_parameters(sizes, 2)
    loads = [sum(s for s, o in zip(sizes, owner, strict=True) if o == k) for k in range(2)]
    assert sorted(owner) != [0] * len(sizes) and max(loads) - min(loads) <= 640
    assert split_parameters([5, 5], 1) == [0, 0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _ps_round(mode: str) -> torch.Tensor:
    """Two workers push fixed gradients once through two real TCP parameter servers; the weight change."""
    addrs = (f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}")
    servers = [threading.Thread(target=serve, args=(TaskEnv(role="ps", index=i, world_size=2, ps_addrs=addrs,
                                                            ps_mode=mode, architecture="parameter-server"),))
               for i in range(2)]
    for t in servers:
        t.start()
    result: dict[int, torch.Tensor] = {}
    # One initial model, copied per worker: the threads share torch's global RNG, so seeding
    # and building inside each thread would race.
    torch.manual_seed(0)
    initial = nn.Linear(3, 2)  # weight and bias land on different servers
    start = torch.cat([p.detach().flatten().clone() for p in initial.parameters()])

    def worker(rank: int) -> None:
        model = copy.deepcopy(initial)
        env = TaskEnv(rank=rank, world_size=2, ps_addrs=addrs, ps_mode=mode, architecture="parameter-server")
        client = ParameterClient(model, env, lr=0.5)
        for p in model.parameters():
            p.grad = torch.full_like(p, float(rank + 1))  # worker 0 pushes 1s, worker 1 pushes 2s
        client.step()
        if mode == "async":
            barrier.wait()  # both pushes applied; pull the final weights
            client.pull()
        result[rank] = torch.cat([p.detach().flatten() for p in model.parameters()])
        client.close()

    barrier = threading.Barrier(2)
    threads = [threading.Thread(target=worker, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads + servers:
        t.join(timeout=30)
    assert torch.equal(result[0], result[1])
    return result[0] - start


def test_parameter_servers_sync_averages_and_async_applies_each() -> None:
    sync = _ps_round("sync")
    assert torch.allclose(sync, torch.full_like(sync, -0.5 * 1.5))  # one step on the mean gradient
    async_ = _ps_round("async")
    assert torch.allclose(async_, torch.full_like(async_, -0.5 * 3.0))  # both gradients applied in turn


_NO_CLOSE = textwrap.dedent("""
    import atexit, sys
    import torch, torch.distributed as dist
    import trainmaster.train as tm
    # registered before the session's own handler, so it runs after it (atexit is last-in, first-out)
    atexit.register(lambda: print("group at exit:", dist.is_initialized(), flush=True))
    session = tm.init()
    net = session.wrap(torch.nn.Linear(4, 2))
    for step in session.steps(3):
        net(torch.ones(8, 4)).sum().backward()  # DDP's all-reduce runs inside backward()
    print("done", flush=True)  # no session.close(): the session leaves the group at exit by itself
""")


def test_a_distributed_session_leaves_its_group_at_exit_without_close(tmp_path: Path) -> None:
    # Two real gloo ranks on loopback. The session's exit handler must leave the group (and give the gloo threads
    # their pause, Session._leave_group) before the interpreter finalizes, even when the script never calls close().
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, "-c", _NO_CLOSE], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env={**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "TM_CPUS": "1",
                                              "MASTER_PORT": str(port), "TM_CHECKPOINT_DIR": str(tmp_path / "ck")})
             for rank in (0, 1)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all("done" in out and "group at exit: False" in out for out in outs), outs
