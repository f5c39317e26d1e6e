"""The diagnosis rules, on figures with known shares and ceilings."""

from __future__ import annotations

import pytest

from autotune import Machine, Measurement, SearchResult, Settings, diagnose
from autotune.decide._diagnosis import (
    COPY_MATTERS,
    DATA_BOUND,
    Diagnosis,
    Searched,
    diagnose_config,
)
from autotune.probe import Figures, Window

FOUR_WORKERS = Settings(batch_size=32, num_workers=4, prefetch_factor=2, persistent_workers=True)
NO_WORKERS = Settings(batch_size=32)


def figures(rate: float, wait: float = 0.0, *, windows: int = 3, startup: float = 0.1) -> Figures:
    """Figures of ``rate`` samples/s, waiting ``wait`` of each one-second window."""
    return Figures(
        windows=tuple(
            Window(
                index=i,
                seconds=1.0,
                samples=int(rate),
                fresh=int(rate),
                steps=int(rate) // 32,
                wait_seconds=wait,
            )
            for i in range(windows)
        ),
        startup_s=startup,
    )


def at(settings: Settings, rate: float, wait: float = 0.0, **kwargs: float) -> Measurement:
    return Measurement(settings=settings, figures=figures(rate, wait, **kwargs))


def limit(rate: float, workers: int = 8) -> Measurement:
    settings = Settings(
        batch_size=32, num_workers=workers, prefetch_factor=2, persistent_workers=True
    )
    return at(settings, rate)


def test_decode_bound_even_with_all_cores_says_no_loader_setting_helps() -> None:
    diagnosis = diagnose_config(
        "best",
        at(FOUR_WORKERS, 900, wait=0.55),
        compute=figures(4000),
        data=figures(950),
        loader_limit=limit(1000),
        cpus=2,
    )
    assert diagnosis.verdict == "data-bound"
    assert diagnosis.wait_share == pytest.approx(0.55)
    assert diagnosis.bound_by == "data"
    assert diagnosis.ceiling == pytest.approx(950)
    assert diagnosis.of_ceiling == pytest.approx(900 / 950)
    (advice,) = diagnosis.advice
    assert "whatever the loader's settings" in advice
    assert "at its best measured (with 8 workers on 2 CPUs), it delivers 1,000 samples/s" in advice
    assert "the model could train 4,000" in advice
    assert "preprocess offline, cache decoded data" in advice and "echo batches" in advice
    assert "compute ceiling (the model on batches already in memory): 4,000 samples/s" in (
        diagnosis.evidence
    )
    assert "the loader alone with 8 workers: 1,000 samples/s" in diagnosis.evidence
    headline = diagnosis.headline()
    assert headline.startswith("best: data-bound, 900 samples/s, waiting for data 55%")
    assert "95% of min(ceilings) = 950 samples/s, the data ceiling" in headline


def test_compute_bound_at_its_ceiling_says_the_loader_keeps_up() -> None:
    diagnosis = diagnose_config(
        "best",
        at(FOUR_WORKERS, 3800, wait=0.02),
        compute=figures(4000),
        data=figures(9000),
        loader_limit=limit(12000),
    )
    assert diagnosis.verdict == "compute-bound"
    assert diagnosis.bound_by == "compute"
    assert diagnosis.of_ceiling == pytest.approx(0.95)
    (advice,) = diagnosis.advice
    assert advice.startswith("the loader keeps up: the model trains at 95% of its compute")
    assert "AMP" in advice


def test_the_default_loader_loads_between_steps() -> None:
    diagnosis = diagnose_config(
        "default loader",
        at(NO_WORKERS, 600, wait=0.6),
        compute=figures(1500),
        data=figures(1000),
        loader_limit=limit(5000),
    )
    assert diagnosis.verdict == "data-bound"
    assert diagnosis.advice == (
        "loading happens in the training process (num_workers=0), one batch after the other "
        "between steps: worker processes load the next batches while the model trains.",
    )


def test_more_workers_help_when_the_loader_alone_is_faster_with_them() -> None:
    diagnosis = diagnose_config(
        "best",
        at(Settings(batch_size=32, num_workers=2, prefetch_factor=2), 800, wait=0.5),
        compute=figures(20000),
        data=figures(850),
        loader_limit=limit(2550),
    )
    first, second = diagnosis.advice
    assert first.startswith("more workers would help: the loader alone with 8 workers")
    assert "3.0x this loader's 850 with 2" in first
    assert '"num_workers": {"low": 0, "high": 8}' in first
    assert "whatever the loader's settings" in second


def test_workers_taking_the_cpu_from_the_training() -> None:
    diagnosis = diagnose_config(
        "best",
        at(FOUR_WORKERS, 1000, wait=0.05),
        compute=figures(2500),
        data=figures(6000),
        cpus=4,
    )
    assert diagnosis.verdict == "compute-bound"
    (advice,) = diagnosis.advice
    assert "runs at 40% of its compute ceiling (2,500 samples/s)" in advice
    assert "4 worker(s) take CPU time from the training on 4 CPUs" in advice


def test_echo_multiplies_what_the_loader_alone_feeds() -> None:
    echoed = Settings(batch_size=32, num_workers=4, prefetch_factor=2, echo=2)
    diagnosis = diagnose_config("best", at(echoed, 1800), compute=figures(4000), data=figures(1000))
    assert diagnosis.data_ceiling == pytest.approx(2000)
    assert diagnosis.of_ceiling == pytest.approx(0.9)


def test_without_ceilings_the_verdict_rests_on_the_wait_share() -> None:
    diagnosis = diagnose_config("best", at(FOUR_WORKERS, 500, wait=0.4))
    assert diagnosis.verdict == "data-bound"
    assert diagnosis.ceiling is None and diagnosis.of_ceiling is None
    assert diagnosis.evidence == ()
    assert any("ceilings were not measured" in a for a in diagnosis.advice)
    assert "min(ceilings)" not in diagnosis.headline()


@pytest.mark.parametrize(
    ("settings", "startup", "expected"),
    [
        (Settings(batch_size=32, num_workers=4, prefetch_factor=2), 2.5, True),
        (FOUR_WORKERS, 2.5, False),  # persistent already
        (Settings(batch_size=32, num_workers=4, prefetch_factor=2), 0.2, False),
    ],
)
def test_slow_worker_start_up_suggests_persistent_workers(settings, startup, expected) -> None:
    diagnosis = diagnose_config("best", at(settings, 1000, wait=0.01, startup=startup))
    said = any("persistent_workers=True pays that once" in a for a in diagnosis.advice)
    assert said is expected


def test_noisy_windows_are_flagged() -> None:
    noisy = Figures(
        windows=tuple(
            Window(index=i, seconds=1.0, samples=s, fresh=s, steps=10, wait_seconds=0.0)
            for i, s in enumerate((500, 1000, 1500))
        )
    )
    diagnosis = diagnose_config("best", Measurement(settings=FOUR_WORKERS, figures=noisy))
    assert any(a.startswith("its windows vary by 50%") for a in diagnosis.advice)


def test_a_results_diagnoses_survive_its_json_round_trip() -> None:
    machine = Machine(cpus=2, cpu_model="x", memory_bytes=2**30, shm_bytes=None, accelerator="cpu")
    result = SearchResult(
        settings=FOUR_WORKERS,
        figures=figures(900, wait=0.5),
        device="cpu",
        machine=machine,
        baseline=at(NO_WORKERS, 300, wait=0.6),
        ceilings={"compute": figures(4000), "data": figures(950)},
        baseline_ceilings={"compute": figures(3000), "data": figures(500)},
        loader_limit=limit(1000),
    )
    again = SearchResult.from_dict(result.to_dict())
    assert again.baseline_ceilings.keys() == {"compute", "data"}
    assert again.loader_limit is not None and again.loader_limit.settings.num_workers == 8
    best, default = diagnose(again)
    assert (best.subject, default.subject) == ("best", "default loader")
    assert best.compute_ceiling == pytest.approx(4000)
    assert default.compute_ceiling == pytest.approx(3000)
    assert default.data_ceiling == pytest.approx(500)
    assert default.loader_limit == pytest.approx(1000)
    assert [d.headline() for d in diagnose(result)] == [best.headline(), default.headline()]


def test_a_figure_above_its_ceiling_blames_a_changing_load() -> None:
    diagnosis = diagnose_config(
        "default loader", at(NO_WORKERS, 184, wait=0.27), compute=figures(108), data=figures(595)
    )
    assert diagnosis.of_ceiling == pytest.approx(184 / 108)
    assert any(
        a.startswith("it measured 170% of a ceiling it cannot beat (108 samples/s)")
        for a in diagnosis.advice
    )


def test_a_fast_loader_is_not_called_the_bottleneck_by_one_slow_worker_count() -> None:
    # In-memory tensors: the loader alone at 0 workers delivers 128,013 samples/s, five
    # times the model's 24,211; with 8 workers (all that start-up) only 17,350. The
    # loader is judged by its best measured figure: it is not the bottleneck.
    diagnosis = diagnose_config(
        "default loader",
        at(NO_WORKERS, 20_000, wait=0.2),
        compute=figures(24_211),
        data=figures(128_013),
        loader_limit=limit(17_350),
        cpus=2,
    )
    assert not any("whatever the loader's settings" in a for a in diagnosis.advice)
    # The same figures with the best loader only at 8 workers: then it is.
    slow = diagnose_config(
        "default loader",
        at(NO_WORKERS, 15_000, wait=0.2),
        compute=figures(24_211),
        data=figures(12_000),
        loader_limit=limit(17_350),
        cpus=2,
    )
    assert any("whatever the loader's settings" in a for a in slow.advice)


def test_the_best_loader_of_the_search_counts_for_every_diagnosis() -> None:
    best_loader = at(NO_WORKERS, 50_000)
    diagnosis = diagnose_config(
        "best",
        at(FOUR_WORKERS, 9_000, wait=0.5),
        compute=figures(24_000),
        data=figures(10_000),
        loader_limit=limit(12_000),
        best_loader=best_loader,
    )
    assert not any("whatever the loader's settings" in a for a in diagnosis.advice)


def test_widening_is_suggested_only_past_a_bound_the_best_sat_on() -> None:
    two = Settings(batch_size=32, num_workers=2, prefetch_factor=2)
    kwargs = {"compute": figures(4000), "data": figures(1000), "loader_limit": limit(2000)}
    # 8 workers were searched and 2 trained fastest: no suggestion to search up to 8.
    searched = diagnose_config(
        "best", at(two, 900, wait=0.5), searched=Searched(max_workers=8), **kwargs
    )
    assert not any("let the search try more" in a for a in searched.advice)
    assert any("the search trained with up to 8 workers" in a for a in searched.advice)
    # The best sat on a bound of 2, below the 8 that measured faster alone: widen.
    on_bound = diagnose_config(
        "best", at(two, 900, wait=0.5), searched=Searched(max_workers=2), **kwargs
    )
    assert any('"high": 8' in a for a in on_bound.advice)
    # Not on the bound (the space reached 4): no suggestion either.
    below = diagnose_config(
        "best", at(two, 900, wait=0.5), searched=Searched(max_workers=4), **kwargs
    )
    assert not any("let the search try more" in a for a in below.advice)


def test_echo_is_not_suggested_when_it_was_searched() -> None:
    kwargs = {"compute": figures(4000), "data": figures(1000), "loader_limit": limit(1000)}
    unsearched = diagnose_config("best", at(FOUR_WORKERS, 900, wait=0.5), **kwargs)
    assert any('space={"echo": [1, 2, 4]}' in a for a in unsearched.advice)
    searched = diagnose_config(
        "best", at(FOUR_WORKERS, 900, wait=0.5), searched=Searched(max_echo=4), **kwargs
    )
    assert not any('space={"echo"' in a for a in searched.advice)
    assert any("searched: it did not pay here" in a for a in searched.advice)


def test_searched_reads_the_space_the_study_records() -> None:
    space = {
        "num_workers": {"low": 0, "high": 8},
        "echo": {"fixed": 1},
        "batch_size": {"choices": [16, 32]},
    }
    assert Searched.from_space(space) == Searched(max_workers=8, max_echo=1)
    assert Searched.from_space({"num_workers": {"choices": [0, 2, 4]}}).max_workers == 4
    assert Searched.from_space({}) == Searched()


def copying(settings: Settings, copy: float, wait: float = 0.02) -> Measurement:
    """A config training 1,000 samples/s, copying to the device ``copy`` of each second."""
    windows = tuple(
        Window(
            index=i,
            seconds=1.0,
            samples=1000,
            fresh=1000,
            steps=31,
            wait_seconds=wait,
            copy_seconds=copy,
        )
        for i in range(3)
    )
    return Measurement(settings=settings, figures=Figures(windows=windows, startup_s=0.1))


PINNED = Settings(batch_size=32, num_workers=4, prefetch_factor=2, pin_memory=True)
COPY_ABOVE = COPY_MATTERS + 0.07
COPY_BELOW = COPY_MATTERS - 0.01


def copy_lines(diagnosis: Diagnosis) -> list[str]:
    return [a for a in diagnosis.advice if a.startswith("host-to-device copy")]


def test_a_copy_that_matters_on_a_gpu_suggests_pinned_memory() -> None:
    diagnosis = diagnose_config("best", copying(FOUR_WORKERS, COPY_ABOVE), device="cuda:0")
    assert diagnosis.copy_share == pytest.approx(COPY_ABOVE)
    # The copy is not waiting for data: the config stays compute-bound.
    assert diagnosis.verdict == "compute-bound"
    assert copy_lines(diagnosis) == [
        "host-to-device copy: 12% of each step; pin_memory would overlap it: with "
        "pin_memory=True batches copy asynchronously, and faster."
    ]


def test_a_copy_below_the_threshold_gets_no_line() -> None:
    diagnosis = diagnose_config("best", copying(FOUR_WORKERS, COPY_BELOW), device="cuda")
    assert copy_lines(diagnosis) == []


@pytest.mark.parametrize(
    ("settings", "device"),
    [(PINNED, "cuda"), (FOUR_WORKERS, "cpu"), (FOUR_WORKERS, None)],
)
def test_pinned_memory_is_suggested_only_unpinned_on_an_accelerator(settings, device) -> None:
    diagnosis = diagnose_config("best", copying(settings, COPY_ABOVE), device=device)
    (line,) = copy_lines(diagnosis)
    assert "pin_memory" not in line
    assert line.endswith("smaller samples (uint8, normalised on the device) would shorten it.")


def test_waiting_in_the_copy_is_not_waiting_for_data() -> None:
    # Blocked in next() 10% of each step, copying 40%: not data-bound.
    diagnosis = diagnose_config("best", copying(FOUR_WORKERS, 0.4, wait=0.1), device="cuda")
    assert diagnosis.wait_share == pytest.approx(0.1)
    assert diagnosis.wait_share < DATA_BOUND
    assert diagnosis.verdict == "compute-bound"
    above = diagnose_config("best", copying(FOUR_WORKERS, 0.0, wait=DATA_BOUND + 0.05))
    assert above.verdict == "data-bound"


def test_the_device_of_a_result_reaches_its_diagnoses() -> None:
    machine = Machine(cpus=2, cpu_model="x", memory_bytes=2**30, shm_bytes=None, accelerator="cuda")
    result = SearchResult(
        settings=FOUR_WORKERS,
        figures=copying(FOUR_WORKERS, COPY_ABOVE).figures,
        device="cuda:0",
        machine=machine,
    )
    (best,) = diagnose(result)
    assert any("pin_memory=True" in line for line in copy_lines(best))
