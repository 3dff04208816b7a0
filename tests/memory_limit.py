"""A resident-memory limit on a process a test spawns: a memory cgroup of its own under the test
process's, which the child joins before it runs (so nothing it allocates escapes the limit). Past
the limit the kernel reclaims page cache, then its OOM killer sends SIGKILL: the limit is real, as
a container's or a systemd unit's `MemoryMax` is in production. Where no memory cgroup can be made
(not root, no delegation) the test fails with what to fix: a limit that quietly did nothing would
prove nothing."""
from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from pathlib import Path

_ROOT = Path("/sys/fs/cgroup")


def _own_group() -> tuple[Path, str]:
    """This process's memory cgroup directory and the cgroup version it lives in."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(",") and (_ROOT / "memory").is_dir():
            return _ROOT / "memory" / path.lstrip("/"), "v1"
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return _ROOT / line[3:].lstrip("/"), "v2"
    raise RuntimeError("no memory cgroup found in /proc/self/cgroup")


class MemoryLimit:
    """`with MemoryLimit(300) as limit: spawn(..., preexec_fn=limit.join)`; `limit.oom_kills`."""

    def __init__(self, mib: int):
        parent, self.version = _own_group()
        self.dir, self.mib = parent / f"dblog-test-{uuid.uuid4().hex[:8]}", mib
        try:
            self.dir.mkdir()
            knob = "memory.limit_in_bytes" if self.version == "v1" else "memory.max"
            (self.dir / knob).write_text(str(mib << 20))
            # Swap would let the process page out instead of meeting the limit.
            swap = self.dir / ("memory.memsw.limit_in_bytes" if self.version == "v1" else "memory.swap.max")
            if swap.exists():
                swap.write_text(str(mib << 20) if self.version == "v1" else "0")
        except OSError as e:
            self.close()
            raise RuntimeError(f"cannot set a memory limit in {self.dir} ({e}): run the tests as root (cgroup v1), "
                               "or on cgroup v2 from a cgroup whose subtree has the memory controller "
                               "(`+memory` in its parent's cgroup.subtree_control)") from e

    def join(self) -> None:
        """For `preexec_fn`: the child moves itself into the group before it runs anything."""
        (self.dir / "cgroup.procs").write_text(str(os.getpid()))

    @property
    def oom_kills(self) -> int:
        events = self.dir / ("memory.oom_control" if self.version == "v1" else "memory.events")
        for line in events.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def close(self) -> None:
        """Kill what is left in the group (a test that failed midway), then remove it."""
        if not self.dir.is_dir():
            return
        for pid in (self.dir / "cgroup.procs").read_text().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        for _ in range(100):   # the kernel empties the group once the processes are reaped
            try:
                self.dir.rmdir()
                return
            except OSError:
                time.sleep(0.05)
        print(f"memory_limit: {self.dir} still holds processes; left in place", file=sys.stderr)

    def __enter__(self) -> MemoryLimit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
