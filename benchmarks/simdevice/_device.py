"""A simulated accelerator's timeline: kernels that pass off the CPU, in launch order.

The device keeps no thread: each kernel starts when it is launched or when the one
before it ends, whichever is later, and ends its device time after that, so the device
computes its timeline from the clock alone. Whoever waits for it (a launch into a full
queue, :meth:`SimDevice.synchronize`) sleeps, which holds no CPU and releases the GIL:
the host's loading goes on meanwhile, in its threads and in the DataLoader's workers,
as it does beside a GPU. A late wake-up delays the host, never the device: the kernels
already queued run on their own timeline, as a GPU's do.

With ``queue_depth`` kernels pending after each launch, the host runs at most that many
steps ahead of the device. A window timed on the host between two step ends (as the
probe times one on a CPU device, with no synchronize at its edges) then counts at most
``queue_depth`` kernels the device has not yet run: over a window of W seconds and
steps of T device seconds, at most ``queue_depth * T / W`` above the device's rate,
and only while the queue fills; a window between two synchronizes counts none.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from benchmarks.simdevice._spec import DeviceSpec


class SimDevice:
    """One process's simulated accelerator: launch, synchronize, and its busy time.

    Args:
        spec: its cost model and queueing.
        clock: seconds, monotonic (the host's ``perf_counter`` by default).
        sleep: waits that many seconds without holding a CPU.
    """

    def __init__(
        self,
        spec: DeviceSpec,
        *,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.spec = spec
        self.clock = clock
        self.sleep = sleep
        self._lock = threading.Lock()
        self._pending: collections.deque[tuple[float, float, int]] = collections.deque()
        self._free_at = 0.0
        self._launched_s = 0.0
        self._kernels = 0
        self._samples = 0

    def launch(self, samples: int, amp: bool) -> None:
        """Queue one step's kernel over ``samples`` samples; in ``sync`` mode, wait for it.

        A full queue (``spec.queue_depth`` kernels pending) first waits for its oldest
        kernel to end.
        """
        seconds = self.spec.step_seconds(samples, amp)
        with self._lock:
            now = self._retire(self.clock())
            while len(self._pending) >= self.spec.queue_depth:
                self._wait_until(self._pending[0][1])
                now = self._retire(self.clock())
            start = max(now, self._free_at)
            self._free_at = start + seconds
            self._pending.append((start, self._free_at, samples))
            self._launched_s += seconds
            self._kernels += 1
            self._samples += samples
        if self.spec.mode == "sync":
            self.synchronize()

    def synchronize(self) -> None:
        """Wait until every kernel launched so far has ended."""
        with self._lock:
            self._wait_until(self._free_at)
            self._retire(self.clock())

    def busy_seconds(self) -> float:
        """Device seconds spent running kernels so far: what was launched less what is
        still to run."""
        with self._lock:
            now = self.clock()
            ahead = sum(max(0.0, end - max(start, now)) for start, end, _ in self._pending)
            return self._launched_s - ahead

    def samples_ahead(self) -> float:
        """Samples launched that the device has not trained yet, a running kernel's
        counted by the share of it still to run: what a host count of samples trained
        is ahead of the device's."""
        with self._lock:
            now = self.clock()
            return sum(
                samples * min(1.0, (end - max(start, now)) / (end - start))
                for start, end, samples in self._pending
                if end > now and end > start
            )

    @property
    def launched_seconds(self) -> float:
        """Device seconds of every kernel launched so far, run or not."""
        return self._launched_s

    @property
    def kernels(self) -> int:
        """Kernels launched so far."""
        return self._kernels

    @property
    def samples(self) -> int:
        """Samples of every kernel launched so far."""
        return self._samples

    def _retire(self, now: float) -> float:
        while self._pending and self._pending[0][1] <= now:
            self._pending.popleft()
        return now

    def _wait_until(self, moment: float) -> None:
        # sleep may return early or late; the device's timeline does not move with it.
        while (left := moment - self.clock()) > 0:
            self.sleep(left)
