"""trainmaster: a scheduler for distributed deep-learning training jobs."""

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from trainmaster.cli.client import Client as Client


def __getattr__(name: str) -> object:
    """`trainmaster.Client`, imported on first use so `import trainmaster` stays light."""
    if name == "Client":
        from trainmaster.cli.client import Client

        return Client
    raise AttributeError(f"module 'trainmaster' has no attribute {name!r}")
