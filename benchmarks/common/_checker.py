"""The plain-loop checker: what a config gives in a user's own training loop, timed
without autotune's probe.

The search's probe must not grade itself (the agreement check and the generalisation
benchmark both rest on that): this module is the
independent judge. It reads a config the way a user's code would (``load_config``)
and builds the loader with :meth:`Settings.loader`, then times the loop a user
writes: fetch a batch, move it to the device, forward, loss, backward, step. It
imports nothing of the probe, the search or the decision (``tests/benchmarks/test_checker.py``
checks that in a fresh interpreter); the default forward and loss are written out
again here for the same reason.

Every measurement is a new process in a session of its own, forked from a zygote that
imported torch once (:mod:`benchmarks.common._zygote`; a new interpreter spent most of a
measurement importing torch), and whatever is left of that session when it ends
(DataLoader workers still prefetching) is killed before the next one starts: the
workers of one measurement would otherwise take CPU from the next.
``python -m benchmarks.common._checker PLAN ANSWER`` still runs one in a new interpreter.

::

    rates = measure_interleaved("benchmarks/workloads/io_bound.py", [default, chosen])
    median(rates[1]) / median(rates[0])
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import gc
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autotune._noise import half_range
from autotune.settings._settings import Settings
from autotune.workload._workload import Workload, load_config
from benchmarks.common._zygote import Zygote, ZygoteError
from benchmarks.simdevice import BusyWatch, samples_ahead, synchronize_current

ROOT = Path(__file__).resolve().parents[2]
STARTUP_ALLOWANCE_S = 300.0
"""Time a measurement may take beyond its warm-up and timed part: starting Python and
torch, building the dataset (a workload's first run writes its files) and the model."""
GROUP_EXIT_S = 5.0
"""How long the leftovers of a measurement get to exit after each signal."""

Say = Callable[[str], None]


class CheckerError(RuntimeError):
    """A measurement did not finish: its message ends with the tail of the child's output."""


# --------------------------------------------------------------------- summaries
def median(values: Sequence[float]) -> float:
    """The median; 0 for no values."""
    return statistics.median(values) if values else 0.0


def spread(values: Sequence[float]) -> float:
    """:func:`autotune._noise.half_range` of the rounds: how far a round may stray from
    the median either way; 0 for fewer than two rounds or a median that is not positive."""
    return half_range(values) or 0.0


# --------------------------------------------------------------------- the parent's side
@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    """One measurement, as the child process receives it (JSON types only)."""

    config: str
    settings: dict[str, Any]
    seconds: float
    """Timed part, when ``steps`` is None."""
    warmup: float
    """Training before the timed part, after the first batch; not timed."""
    steps: int | None = None
    """Timed steps instead of ``seconds``."""
    device: str | None = None
    """None: the config's device, else a GPU when there is one, else the CPU."""
    seed: int = 0


def measure(
    config_path: str | Path,
    settings: Settings,
    *,
    seconds: float = 1.5,
    warmup: float = 0.5,
    steps: int | None = None,
    device: str | None = None,
    seed: int = 0,
    readings: list[dict[str, Any]] | None = None,
) -> float:
    """Time one config in a new process; returns samples/s.

    Args:
        readings: where given, a simulated accelerator's reading over the timed part is
            appended to it (see :func:`measure_answer`); nothing on another device.

    Raises:
        CheckerError: the measurement failed or did not finish in time.
    """
    answer = measure_answer(
        config_path, settings, seconds=seconds, warmup=warmup, steps=steps, device=device, seed=seed
    )
    if readings is not None and answer["device"]:
        readings.append(answer["device"])
    rate: float = answer["samples_per_s"]
    return rate


def measure_answer(
    config_path: str | Path,
    settings: Settings,
    *,
    seconds: float = 1.5,
    warmup: float = 0.5,
    steps: int | None = None,
    device: str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Time one config in a new process; returns its ``samples_per_s`` and, on a
    simulated accelerator (:mod:`benchmarks.simdevice`), its ``device`` reading over the
    timed part (``busy_s``, ``wall_s``, ``utilisation``, ``ceiling``), else None.

    Raises:
        CheckerError: the measurement failed or did not finish in time.
    """
    plan = Plan(
        config=str(Path(config_path).resolve()),
        settings=settings.to_dict(),
        seconds=seconds,
        warmup=warmup,
        steps=steps,
        device=device,
        seed=seed,
    )
    # A config trained on several DDP ranks is measured on as many processes.
    ranks = config_ranks(plan.config)
    answer = run_measurement(
        "benchmarks.common._checker_ddp" if ranks > 1 else "benchmarks.common._checker",
        dataclasses.asdict(plan),
        limit=STARTUP_ALLOWANCE_S + warmup + seconds,
        what=f"{Path(config_path).name} {settings.describe()}",
    )
    return {"device": None, **answer}


def config_ranks(config: str | Path) -> int:
    """The DDP ranks a config's ``search`` names (1 where it names none), as its user
    launches it with ``torchrun --nproc-per-node``.

    Raises:
        ValueError: ``search["ranks"]`` is not an integer >= 1.
    """
    ranks = load_config(config).search.get("ranks") or 1
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"{config}: search['ranks'] is {ranks!r}; expected an integer >= 1.")
    return ranks


def measure_interleaved(
    config_path: str | Path,
    settings_list: Sequence[Settings],
    rounds: int = 5,
    seconds: float = 1.5,
    warmup: float = 0.5,
    *,
    steps: int | None = None,
    device: str | None = None,
    seed: int = 0,
    say: Say | None = None,
) -> list[list[float]]:
    """Measure every config once per round, in :func:`round_order` (A B C, C B A, ...),
    so a machine that drifts moves all alike; each measurement is a new process.

    Returns:
        Each config's samples/s, one per round: ``result[config][round]``.

    Raises:
        CheckerError: a measurement failed.
    """
    figures: list[list[float]] = [[] for _ in settings_list]
    for round_number in range(1, rounds + 1):
        for index in round_order(len(settings_list), round_number):
            settings = settings_list[index]
            rate = measure(
                config_path,
                settings,
                seconds=seconds,
                warmup=warmup,
                steps=steps,
                device=device,
                seed=seed,
            )
            figures[index].append(rate)
            if say is not None:
                say(f"plain loop, round {round_number}: {settings.describe()}: {rate:,.0f}/s")
    return figures


def round_order(count: int, round_number: int) -> list[int]:
    """The order of ``count`` configs in round ``round_number`` (from 1): as given in odd
    rounds, reversed in even ones (A B C, C B A, A B C, ...).

    Within a round of minutes the machine's speed drifts; in the same order every round
    the configs measured last would get the same share of that drift every time, and a
    ratio taken within a round would carry it. Reversed every other round, a steady drift
    favours each config in one round as much as it costs it in the next.
    """
    order = list(range(count))
    return order if round_number % 2 else order[::-1]


def run_measurement(
    module: str, plan: Mapping[str, Any], *, limit: float, what: str
) -> dict[str, Any]:
    """Run ``MODULE._child_main([PLAN_JSON, ANSWER_PATH])`` in a fork of the zygote
    (:mod:`benchmarks.common._zygote`), in a session of its own, kill what is left of that
    session, and return the JSON the child wrote to ``ANSWER_PATH``.

    Args:
        module: the child's module (this one, or another measuring child of the suite).
        plan: what it is to measure (JSON types only).
        limit: seconds after which the child is killed.
        what: names the measurement in the error.

    Raises:
        CheckerError: the child failed, ran past ``limit`` or wrote no answer.
    """
    with tempfile.TemporaryDirectory(prefix="autotune-checker-") as folder:
        answer = Path(folder) / "answer.json"
        log = Path(folder) / "output.log"
        returncode = _run_child(module, [json.dumps(plan), str(answer)], log, limit)
        if returncode != 0 or not answer.exists():
            raise CheckerError(f"{what}: the measurement exited with {returncode}:\n{_tail(log)}")
        found: dict[str, Any] = json.loads(answer.read_text())
    return found


_zygote: Zygote | None = None


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    # The children import this module and autotune from the same tree as this process.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def zygote() -> Zygote:
    """The zygote measurements fork from: started at the first, again if it has ended,
    and ended when this process exits (or by :func:`close_zygote`)."""
    global _zygote
    if _zygote is None or not _zygote.alive():
        close_zygote()
        _zygote = Zygote(_environment())
    return _zygote


@atexit.register
def close_zygote() -> None:
    """End the zygote, if one runs; the next measurement starts another."""
    global _zygote
    if _zygote is not None:
        _zygote.close()
        _zygote = None


def _run_child(module: str, argv: list[str], log: Path, limit: float) -> int | None:
    """Run one measurement in a session of its own and kill what is left of it after;
    returns the child's exit code (None when it ran past ``limit`` seconds)."""
    try:
        # Its temporary files (multiprocessing's, a killed one's too) go where the
        # answer goes, and are removed with it.
        env = {**_environment(), "TMPDIR": str(log.parent)}
        pid, returncode = zygote().run(module, argv, log, limit, env)
    except ZygoteError as error:
        close_zygote()
        log.write_text(str(error))
        return -1
    _stop_group(pid)
    return returncode


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal is still a member
        return True
    return True


def _stop_group(group: int) -> None:
    """End every process of a measurement's session: politely, then by force."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        if not _group_alive(group):
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signum)
        deadline = time.monotonic() + GROUP_EXIT_S
        while _group_alive(group) and time.monotonic() < deadline:
            time.sleep(0.02)


def _tail(log: Path, lines: int = 20) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "(no output)"
    return "\n".join(text.strip().splitlines()[-lines:]) or "(no output)"


# --------------------------------------------------------------------- the default step
def default_forward(model: nn.Module, batch: Any) -> Any:
    """``model(**batch)`` for a dict, ``model(inputs)`` for ``(inputs, targets, ...)``,
    ``model(batch)`` for a tensor."""
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, list | tuple):
        return model(batch[0])
    return model(batch)


def default_loss(output: Any, batch: Any) -> torch.Tensor:
    """The loss a config without ``step`` or ``loss`` trains on.

    - ``output.loss`` (or ``output["loss"]``) when the model computes one (Hugging Face
      style; the only choice for a dict batch);
    - ``(inputs, targets, ...)``: cross-entropy for integer class targets, mean squared
      error for targets of the output's shape;
    - a tensor batch: ``output.float().mean()`` (the loop measures speed, not learning).

    Raises:
        TypeError: no rule applies.
    """
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, Mapping):
        loss = output.get("loss")
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(batch, Mapping):
        raise TypeError("a dict batch needs a model output with a `loss`")
    if isinstance(output, list | tuple):
        output = next((o for o in output if isinstance(o, torch.Tensor)), output)
    if not isinstance(output, torch.Tensor):
        raise TypeError(f"the model returned {type(output).__name__}; expected a tensor")
    if isinstance(batch, list | tuple) and len(batch) >= 2 and isinstance(batch[1], torch.Tensor):
        return _supervised_loss(output, batch[1])
    return output.float().mean()


def _supervised_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if not target.is_floating_point() and output.dim() == target.dim() + 1:
        return F.cross_entropy(output.float(), target.long())
    if output.shape == target.shape:
        return F.mse_loss(output.float(), target.float())
    raise TypeError(
        f"cannot pair the output {list(output.shape)} with targets {list(target.shape)}"
    )


def batch_samples(batch: Any) -> int | None:
    """Samples in a batch: the first dimension of its first tensor (in a dict's or a
    sequence's order); None when it holds no tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else 1
    values = list(batch.values()) if isinstance(batch, Mapping) else batch
    if isinstance(values, list | tuple):
        for value in values:
            found = batch_samples(value)
            if found is not None:
                return found
    return None


def to_device(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    """Every tensor of a (nested) batch on ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return {key: to_device(value, device, non_blocking) for key, value in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(to_device(value, device, non_blocking) for value in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(to_device(value, device, non_blocking) for value in batch)
    return batch


# --------------------------------------------------------------------- the child's side
_AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def make_train_step(
    workload: Workload, model: nn.Module, device: torch.device, amp: str
) -> Callable[[Any], None]:
    """One training step as a user writes it: the config's ``step``, or forward and its
    ``loss`` (else the default); backward; the config's optimizer (else SGD with
    momentum); under autocast with AMP, through a GradScaler for fp16 on CUDA."""
    optimizer = (workload.optimizer or _sgd)(model.parameters())
    scaler = torch.amp.GradScaler("cuda") if amp == "fp16" and device.type == "cuda" else None

    def autocast() -> contextlib.AbstractContextManager[Any]:
        if amp == "off":
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=_AMP_DTYPES[amp])

    def train(batch: Any) -> None:
        with autocast():
            if workload.step is not None:
                loss = workload.step(model, batch)
            else:
                loss = (workload.loss or default_loss)(default_forward(model, batch), batch)
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()

    return train


def _sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


def _epochs(loader: Any) -> Generator[Any, None, None]:
    """Batches without end: a new epoch when one ends, as a training loop's outer loop."""
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise RuntimeError("the loader yielded no batches")


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a GPU's, or this process's simulated
    accelerator's), so that a clock read after it is true."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    synchronize_current()


def timed_loop(
    batches: Iterator[Any],
    train: Callable[[Any], None],
    plan: Plan,
    *,
    device: torch.device,
    non_blocking: bool,
    default_n: int,
    queued: int = 0,
    on_timed: Callable[[], None] | None = None,
) -> float:
    """Warm up, then time ``plan.steps`` steps (or ``plan.seconds``); returns samples/s.

    The warm-up lasts ``plan.warmup`` seconds and at least ``queued`` steps after the
    first batch: the batches the workers loaded while they all started are trained on
    before the clock starts. Timed, that backlog reads as a loader faster than it is (16
    workers of a CPU-bound loader on 2 CPUs hand over ~16 batches at once).

    Timed by ``plan.seconds``: see :func:`_time_span`. The timed part covers what a
    training loop does: wait for the batch, copy it to the device, train on it.
    ``on_timed`` is called once the warm-up's device work is done, as the timed part
    begins.
    """
    clock = time.perf_counter
    batch = next(batches)  # start-up (workers starting, the first batch): not warm-up
    began = clock()
    steps = 0
    longest = 0.0
    while True:
        train(to_device(batch, device, non_blocking))
        steps += 1
        if clock() - began >= plan.warmup and steps > queued:
            break
        batch, waited, _ = _fetch(batches)
        longest = max(longest, waited)
    synchronize(device)
    if on_timed is not None:
        on_timed()
    if plan.steps is not None:
        return _time_steps(batches, train, plan.steps, device, non_blocking, default_n)
    return _time_span(
        batches,
        train,
        plan.seconds,
        longest,
        queued=queued,
        device=device,
        non_blocking=non_blocking,
        default_n=default_n,
    )


GAP_SHARE = 0.03
"""A wait for a batch shorter than this share of the timed span cannot move its figure
by more than that share, wherever the span starts or ends."""
DRY_LIMIT_S = 20.0
"""How long past its seconds the timed part waits for a second gap to end on."""


def _time_span(
    batches: Iterator[Any],
    train: Callable[[Any], None],
    seconds: float,
    longest: float,
    *,
    queued: int,
    device: torch.device,
    non_blocking: bool,
    default_n: int,
) -> float:
    """samples/s over ``seconds`` or more, starting and ending at the same point of the
    loader's rhythm.

    Workers that share few CPUs finish their batches together, so batches come in
    bursts with the loop idle between them (seen: 16 workers of a heavy loader on 2
    CPUs, ~5 s of training, then ~2.5 s of waiting, over and over). A span that starts or
    ends inside a burst counts the burst and not the gap, or the gap and not the burst:
    1.5 s read that loader at 1.6 times what 7 s read. So when the longest wait seen (in
    the warm-up, ``longest``, or since) is over :data:`GAP_SHARE` of the span, the
    figure runs from the end of one gap to the end of another at least ``seconds``
    later: from the arrival of a batch the loop waited for at least half the longest
    wait to the arrival of another such (not counted), timing on until there are two
    (for at most :data:`DRY_LIMIT_S` more, then over the whole span). Otherwise no
    wait was long enough to matter, and it runs from before the first batch to the end
    of the step that ends ``seconds`` and more than ``queued`` batches: the workers
    load about that many in a burst, so the span holds the wait after one if there is
    one. (A warm-up that trains the batches queued at start-up without waiting can end
    just as the next burst comes; 1.5 s of that burst alone read 8 workers of a heavy
    loader at 537-561 samples/s, where 15 longer-timed rounds read 261-331.) Between two
    gaps, the samples counted are those the device has trained, not those launched: on
    the simulated accelerator, whose queue runs behind the host, a count of launches
    read one config 6% above the device's ceiling.
    """
    clock = time.perf_counter
    arrivals: list[float] = []
    waits: list[float] = []
    counted: list[float] = []  # samples trained before each batch
    ends: list[int] = []  # the batches that came at the end of a gap
    samples = 0
    start = clock()
    while True:
        batch, waited, came = _fetch(batches)
        arrivals.append(came)
        waits.append(waited)
        # Trained by the device, not launched: an accelerator's queue runs behind the host.
        counted.append(samples - samples_ahead())
        if waited > longest:
            longest = waited
            ends = [index for index, wait in enumerate(waits) if wait >= longest / 2]
        elif waited >= longest / 2:
            ends.append(len(waits) - 1)
        train(to_device(batch, device, non_blocking))
        samples += batch_samples(batch) or default_n
        span = clock() - start
        if span < seconds or len(arrivals) <= queued:
            continue
        if longest < GAP_SHARE * span:
            break
        first, last = (ends[0], ends[-1]) if ends else (0, 0)
        if arrivals[last] - arrivals[first] >= seconds:
            return (counted[last] - counted[first]) / (arrivals[last] - arrivals[first])
        if span >= seconds + DRY_LIMIT_S:
            break
    synchronize(device)
    return samples / (clock() - start)


def _fetch(batches: Iterator[Any]) -> tuple[Any, float, float]:
    """The next batch, how long the loop waited for it, and when it came."""
    asked = time.perf_counter()
    batch = next(batches)
    came = time.perf_counter()
    return batch, came - asked, came


def _time_steps(
    batches: Iterator[Any],
    train: Callable[[Any], None],
    steps: int,
    device: torch.device,
    non_blocking: bool,
    default_n: int,
) -> float:
    """samples/s over ``steps`` steps, from before the first batch to after the last."""
    samples = 0
    start = time.perf_counter()
    for _ in range(steps):
        batch = next(batches)
        train(to_device(batch, device, non_blocking))
        samples += batch_samples(batch) or default_n
    synchronize(device)
    return samples / (time.perf_counter() - start)


def run_plan(plan: Plan) -> float:
    """Build the config's dataset, model and loader here, and time the plain loop;
    returns samples/s (:func:`run_plan_answer`'s)."""
    rate: float = run_plan_answer(plan)["samples_per_s"]
    return rate


def run_plan_answer(plan: Plan) -> dict[str, Any]:
    """Build the config's dataset, model and loader here, and time the plain loop.

    With ``echo`` > 1, :meth:`Settings.loader` yields each batch that many times, so
    each batch is trained on ``echo`` times and counted each time (samples trained).

    Returns:
        ``samples_per_s``, and ``device``: a simulated accelerator's reading over the
        timed part (:class:`benchmarks.simdevice.DeviceReading`), None on another device.
    """
    workload = load_config(plan.config).workload
    settings = Settings.from_dict(plan.settings)
    torch.manual_seed(plan.seed)
    if settings.threads is not None:
        torch.set_num_threads(settings.threads)
    cuda = torch.cuda.is_available()
    device = torch.device(plan.device or workload.device or ("cuda" if cuda else "cpu"))
    model = workload.make_model().to(device)
    model.train()
    train = make_train_step(workload, model, device, settings.amp)
    overrides = {"collate_fn": workload.collate_fn} if workload.collate_fn else {}
    # Settings.loader shuffles a map-style dataset and not an iterable one, as a user would.
    loader = settings.loader(workload.make_dataset(), **overrides)
    batches = _epochs(loader)
    watch = BusyWatch()
    try:
        rate = timed_loop(
            batches,
            train,
            plan,
            device=device,
            non_blocking=settings.pin_memory and device.type == "cuda",
            default_n=settings.batch_size,
            queued=settings.batches_ahead * settings.echo,  # echo trains each one echo times
            on_timed=watch.start,
        )
        reading = watch.stop(settings.batch_size, settings.amp != "off")
        return {"samples_per_s": rate, "device": reading.to_dict() if reading else None}
    finally:
        # Workers stop when their iterator goes (the parent kills any that linger).
        batches.close()
        del batches, loader
        gc.collect()


def _child_main(argv: Sequence[str]) -> int:
    """``python -m benchmarks.common._checker PLAN_JSON ANSWER_PATH``: one measurement."""
    plan = Plan(**json.loads(argv[0]))
    Path(argv[1]).write_text(json.dumps(run_plan_answer(plan)))
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
