"""Joining a Ray cluster as a driver, with the settings a loopback cluster needs.

Ray (2.60) rewrites a loopback address (`127.0.0.1`, `localhost`) into the
machine's outward address before connecting, so a cluster bound to loopback
only (tests, a laptop) is never reached and the driver hangs. For a loopback
address trainmaster turns that rewrite off (Ray's own switch,
`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`) and names the driver's node
`127.0.0.1`. Token authentication (`RAY_AUTH_MODE=token`, the token in
`RAY_AUTH_TOKEN` or `~/.ray/auth_token`) is Ray's: set it in the daemon's
environment as on every node; trainmaster passes it through untouched.
"""

from __future__ import annotations

import os
import sys

LOOPBACK = ("127.0.0.1", "localhost", "::1")
NO_REWRITE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray keeps 127.0.0.1 as given


def host_of(address: str) -> str:
    """`host` of `host:port` (a `ray://` prefix dropped)."""
    bare = address.removeprefix("ray://")
    return bare.rsplit(":", 1)[0].strip("[]") if ":" in bare else bare


def is_loopback(address: str | None) -> bool:
    return address is not None and host_of(address) in LOOPBACK


def keep_loopback() -> None:
    """Stop Ray from rewriting a loopback address (also when `ray` is imported already)."""
    os.environ[NO_REWRITE] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False  # type: ignore[attr-defined]


def connect(address: str | None, namespace: str) -> None:
    """Join the Ray cluster at `address` (None: `RAY_ADDRESS` or the cluster started on this machine)."""
    if is_loopback(address):
        keep_loopback()
    import ray

    if ray.is_initialized():
        return
    extra: dict[str, str] = {"_node_ip_address": "127.0.0.1"} if is_loopback(address) else {}
    try:
        ray.init(address=address or "auto", namespace=namespace, log_to_driver=False,
                 logging_level="WARNING", **extra)  # type: ignore[arg-type]
    except ConnectionError as exc:
        raise ConnectionError(f"--ray-address {address or 'auto'}: no Ray cluster there ({exc}); start one with "
                              "`ray start --head` or give the head's GCS address host:port") from exc
