"""The diagnosis rules, on figures with known shares and ceilings."""

from __future__ import annotations

import dataclasses

import pytest

from autotune import Machine, Measurement, SearchResult, Settings, diagnose
from autotune.decide._diagnosis import (
    COPY_MATTERS,
    DATA_BOUND,
    Context,
    Diagnosis,
    Searched,
    diagnose_config,
)
from autotune.probe import Figures, Window

FOUR_WORKERS = Settings(batch_size=32, num_workers=4, prefetch_factor=2, persistent_workers=True)
NO_WORKERS = Settings(batch_size=32)
TWO_WORKERS = Settings(batch_size=32, num_workers=2, prefetch_factor=2)
"""Not persistent."""


def figures(
    rate: float,
    wait: float = 0.0,
    *,
    windows: int = 3,
    startup: float = 0.1,
    seconds: float = 1.0,
    echo: int = 1,
) -> Figures:
    """Figures of ``rate`` samples/s, waiting ``wait`` of each window of ``seconds``; with
    echo, each fresh sample trained on ``echo`` times."""
    samples = int(rate * seconds)
    return Figures(
        windows=tuple(
            Window(
                index=i,
                seconds=seconds,
                samples=samples,
                fresh=samples // echo,
                steps=samples // 32,
                wait_seconds=wait * seconds,
            )
            for i in range(windows)
        ),
        startup_s=startup,
    )


def at(settings: Settings, rate: float, wait: float = 0.0, **kwargs: float) -> Measurement:
    return Measurement(settings=settings, figures=figures(rate, wait, **kwargs))


def limit(rate: float, workers: int = 8, **kwargs: float) -> Measurement:
    settings = Settings(
        batch_size=32, num_workers=workers, prefetch_factor=2, persistent_workers=True
    )
    return at(settings, rate, **kwargs)


def test_decode_bound_even_with_all_cores_says_no_loader_setting_helps() -> None:
    diagnosis = diagnose_config(
        "best",
        at(FOUR_WORKERS, 900, wait=0.55),
        compute=figures(4000),
        data=figures(950),
        context=Context(loader_limit=limit(1000), cpus=2),
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
        context=Context(loader_limit=limit(12000)),
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
        context=Context(loader_limit=limit(5000)),
    )
    assert diagnosis.verdict == "data-bound"
    assert diagnosis.advice == (
        "loading happens in the training process (num_workers=0), one batch after the other "
        "between steps: worker processes load the next batches while the model trains.",
    )


def test_a_chosen_loader_without_workers_is_not_told_that_workers_help() -> None:
    # The quickstart at b2fadca kept the default loader (no workers, 51% waiting) after
    # a search over up to 8 workers, and its diagnosis still said workers would load
    # the next batches while the model trains: advice the search had just refuted.
    kwargs = {"compute": figures(2829), "data": figures(4042)}
    limited = limit(4975)
    kept = diagnose_config(
        "default loader (the recommendation)",
        at(NO_WORKERS, 2035, wait=0.51),
        **kwargs,
        context=Context(
            loader_limit=limited, cpus=2, searched=Searched(max_workers=8), chosen=True
        ),
    )
    (advice,) = kept.advice
    assert advice == (
        "loading happens in the training process (num_workers=0), between steps, yet the "
        "search covered up to 8 workers and none trained faster beyond the noise: on 2 "
        "CPUs, workers take the CPU time the training needs. Only cheaper loading "
        "(preprocessed or cached data, augmentation on the device) shortens the wait."
    )
    # Not chosen (the search recommends a config with workers): workers are the advice.
    other = diagnose_config(
        "default loader",
        at(NO_WORKERS, 2035, wait=0.51),
        **kwargs,
        context=Context(loader_limit=limited, searched=Searched(max_workers=8)),
    )
    assert other.advice[0].endswith("load the next batches while the model trains.")
    # Chosen, but the space held no workers: the search never tried them, so they are.
    untried = diagnose_config(
        "best",
        at(NO_WORKERS, 2035, wait=0.51),
        **kwargs,
        context=Context(loader_limit=limited, searched=Searched(max_workers=0), chosen=True),
    )
    assert untried.advice == other.advice


def test_a_chosen_loader_without_workers_says_when_workers_load_slower() -> None:
    # Tiny in-memory samples: the loader alone delivers 137,940 samples/s in the training
    # process and 16,918 with 8 workers; handing batches over costs more than loading.
    diagnosis = diagnose_config(
        "best",
        at(NO_WORKERS, 98_194, wait=0.45),
        compute=figures(190_557),
        data=figures(137_940),
        context=Context(loader_limit=limit(16_918), searched=Searched(max_workers=8), chosen=True),
    )
    assert diagnosis.advice[0].endswith(
        "none trained faster beyond the noise: the loader alone delivers 16,918 samples/s "
        "with 8 workers against 137,940 with none, so handing batches between processes "
        "costs more than loading them here."
    )
    # Equal figures are not "slower": the CPU line, without the CPU count it was not given.
    equal = diagnose_config(
        "best",
        at(NO_WORKERS, 98_194, wait=0.45),
        compute=figures(190_557),
        data=figures(16_918),
        context=Context(loader_limit=limit(16_918), searched=Searched(max_workers=8), chosen=True),
    )
    assert "beside the training, workers take the CPU time" in equal.advice[0]
    # No loader-alone figures at all: nothing says workers load slower; the CPU line.
    unmeasured = diagnose_config(
        "best",
        at(NO_WORKERS, 98_194, wait=0.45),
        context=Context(searched=Searched(max_workers=8), chosen=True, cpus=2),
    )
    assert "on 2 CPUs, workers take the CPU time" in unmeasured.advice[0]


def test_a_kept_default_is_diagnosed_once_as_the_recommendation() -> None:
    machine = Machine(cpus=2, cpu_model="x", memory_bytes=2**30, shm_bytes=None, accelerator="cpu")
    default = at(NO_WORKERS, 2035, wait=0.51)
    result = SearchResult(
        settings=NO_WORKERS,
        figures=default.figures,
        device="cpu",
        machine=machine,
        baseline=default,
        baseline_ceilings={"compute": figures(2829), "data": figures(4042)},
        loader_limit=limit(4975),
        space={"num_workers": {"low": 0, "high": 8}},
        is_default=True,
    )
    (kept,) = diagnose(result)
    assert kept.subject == "default loader (the recommendation)"
    assert kept.compute_ceiling == pytest.approx(2829)
    assert "the search covered up to 8 workers" in kept.advice[0]
    # The same figures when the search chose another config: two diagnoses, and the
    # default's advice is the workers the winner has.
    chose = dataclasses.replace(result, settings=FOUR_WORKERS, is_default=False)
    best, other = diagnose(chose)
    assert (best.subject, other.subject) == ("best", "default loader")
    assert other.advice[0].endswith("while the model trains.")


def test_more_workers_help_when_the_loader_alone_is_faster_with_them() -> None:
    diagnosis = diagnose_config(
        "best",
        at(Settings(batch_size=32, num_workers=2, prefetch_factor=2), 800, wait=0.5),
        compute=figures(20000),
        data=figures(850),
        context=Context(loader_limit=limit(2550)),
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
        context=Context(cpus=4),
    )
    assert diagnosis.verdict == "compute-bound"
    (advice,) = diagnosis.advice
    assert "runs at 40% of its compute ceiling (2,500 samples/s)" in advice
    assert "4 workers take CPU time from the training on 4 CPUs" in advice


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
        context=Context(loader_limit=limit(17_350), cpus=2),
    )
    assert not any("whatever the loader's settings" in a for a in diagnosis.advice)
    # The same figures with the best loader only at 8 workers: then it is.
    slow = diagnose_config(
        "default loader",
        at(NO_WORKERS, 15_000, wait=0.2),
        compute=figures(24_211),
        data=figures(12_000),
        context=Context(loader_limit=limit(17_350), cpus=2),
    )
    assert any("whatever the loader's settings" in a for a in slow.advice)


def test_the_best_loader_of_the_search_counts_for_every_diagnosis() -> None:
    best_loader = at(NO_WORKERS, 50_000)
    diagnosis = diagnose_config(
        "best",
        at(FOUR_WORKERS, 9_000, wait=0.5),
        compute=figures(24_000),
        data=figures(10_000),
        context=Context(loader_limit=limit(12_000), best_loader=best_loader),
    )
    assert not any("whatever the loader's settings" in a for a in diagnosis.advice)


def test_widening_is_suggested_only_past_a_bound_the_best_sat_on() -> None:
    two = Settings(batch_size=32, num_workers=2, prefetch_factor=2)
    kwargs = {"compute": figures(4000), "data": figures(1000)}
    limited = limit(2000)
    # 8 workers were searched and 2 trained fastest: no suggestion to search up to 8.
    searched = diagnose_config(
        "best",
        at(two, 900, wait=0.5),
        **kwargs,
        context=Context(loader_limit=limited, searched=Searched(max_workers=8)),
    )
    assert not any("let the search try more" in a for a in searched.advice)
    assert any("the search trained with up to 8 workers" in a for a in searched.advice)
    # The best sat on a bound of 2, below the 8 that measured faster alone: widen.
    on_bound = diagnose_config(
        "best",
        at(two, 900, wait=0.5),
        **kwargs,
        context=Context(loader_limit=limited, searched=Searched(max_workers=2)),
    )
    assert any('"high": 8' in a for a in on_bound.advice)
    # Not on the bound (the space reached 4): no suggestion either.
    below = diagnose_config(
        "best",
        at(two, 900, wait=0.5),
        **kwargs,
        context=Context(loader_limit=limited, searched=Searched(max_workers=4)),
    )
    assert not any("let the search try more" in a for a in below.advice)


def test_echo_is_not_suggested_when_it_was_searched() -> None:
    kwargs = {"compute": figures(4000), "data": figures(1000)}
    limited = limit(1000)
    unsearched = diagnose_config(
        "best", at(FOUR_WORKERS, 900, wait=0.5), **kwargs, context=Context(loader_limit=limited)
    )
    assert any('space={"echo": [1, 2, 4]}' in a for a in unsearched.advice)
    searched = diagnose_config(
        "best",
        at(FOUR_WORKERS, 900, wait=0.5),
        **kwargs,
        context=Context(loader_limit=limited, searched=Searched(max_echo=4)),
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
    diagnosis = diagnose_config(
        "best", copying(FOUR_WORKERS, COPY_ABOVE), context=Context(device="cuda:0")
    )
    assert diagnosis.copy_share == pytest.approx(COPY_ABOVE)
    # The copy is not waiting for data: the config stays compute-bound.
    assert diagnosis.verdict == "compute-bound"
    assert copy_lines(diagnosis) == [
        "host-to-device copy: 12% of each step; pin_memory=True would shorten it: a "
        "pinned batch copies faster and without holding the host, which goes on loading "
        "and launching the step meanwhile; the copy still runs on the device's compute "
        "stream, so it overlaps the host's work, not the device's compute."
    ]


def test_a_copy_below_the_threshold_gets_no_line() -> None:
    diagnosis = diagnose_config(
        "best", copying(FOUR_WORKERS, COPY_BELOW), context=Context(device="cuda")
    )
    assert copy_lines(diagnosis) == []


@pytest.mark.parametrize(
    ("settings", "device"),
    [(PINNED, "cuda"), (FOUR_WORKERS, "cpu"), (FOUR_WORKERS, None)],
)
def test_pinned_memory_is_suggested_only_unpinned_on_an_accelerator(settings, device) -> None:
    diagnosis = diagnose_config(
        "best", copying(settings, COPY_ABOVE), context=Context(device=device)
    )
    (line,) = copy_lines(diagnosis)
    assert "pin_memory" not in line
    assert line.endswith("smaller samples (uint8, normalised on the device) would shorten it.")


def test_waiting_in_the_copy_is_not_waiting_for_data() -> None:
    # Blocked in next() 10% of each step, copying 40%: not data-bound.
    diagnosis = diagnose_config(
        "best", copying(FOUR_WORKERS, 0.4, wait=0.1), context=Context(device="cuda")
    )
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


def said(diagnosis: Diagnosis, text: str) -> bool:
    """Whether any of the diagnosis's advice says ``text``."""
    return any(text in advice for advice in diagnosis.advice)


# The thresholds, each pinned on both sides and at the boundary itself.


@pytest.mark.parametrize(
    ("wait", "verdict"), [(0.14, "compute-bound"), (0.15, "compute-bound"), (0.16, "data-bound")]
)
def test_data_bound_is_waiting_more_than_15_percent_of_each_step(wait, verdict) -> None:
    diagnosis = diagnose_config("best", at(FOUR_WORKERS, 1000, wait=wait, windows=1))
    assert diagnosis.verdict == verdict


@pytest.mark.parametrize(("rate", "keeps_up"), [(3560, False), (3600, True), (3640, True)])
def test_the_loader_keeps_up_from_90_percent_of_the_compute_ceiling(rate, keeps_up) -> None:
    diagnosis = diagnose_config(
        "best", at(FOUR_WORKERS, rate), compute=figures(4000), data=figures(9000)
    )
    assert said(diagnosis, "the loader keeps up") is keeps_up


@pytest.mark.parametrize(("best", "outside"), [(3560, True), (3600, False), (3640, False)])
def test_loading_is_the_bottleneck_below_90_percent_of_the_compute_ceiling(best, outside) -> None:
    diagnosis = diagnose_config(
        "best", at(FOUR_WORKERS, 1000, wait=0.5), compute=figures(4000), data=figures(best)
    )
    assert said(diagnosis, "whatever the loader's settings") is outside


@pytest.mark.parametrize(("rate", "contended"), [(3160, True), (3200, False), (3240, False)])
def test_workers_take_the_cpu_below_80_percent_of_the_compute_ceiling(rate, contended) -> None:
    diagnosis = diagnose_config("best", at(FOUR_WORKERS, rate), compute=figures(4000))
    assert said(diagnosis, "take CPU time from the training") is contended


def test_only_workers_take_the_cpu_from_the_training() -> None:
    none = diagnose_config("best", at(NO_WORKERS, 1000), compute=figures(4000))
    assert not said(none, "CPU time")
    one = Settings(batch_size=32, num_workers=1, prefetch_factor=2)
    diagnosis = diagnose_config("best", at(one, 1000), compute=figures(4000))
    assert diagnosis.advice == (
        "the training rarely waits yet runs at 25% of its compute ceiling (4,000 samples/s): "
        "the loader's 1 worker takes CPU time from the training. Cheaper loading "
        "(preprocessed or cached data, augmentation on the device) frees it.",
    )


@pytest.mark.parametrize(
    ("settings", "startup", "expected"),
    [
        (TWO_WORKERS, 0.95, False),
        (TWO_WORKERS, 1.0, True),
        (TWO_WORKERS, 1.05, True),
        (Settings(batch_size=32, num_workers=1, prefetch_factor=2), 2.5, True),
        (NO_WORKERS, 2.5, False),  # nothing to start
    ],
)
def test_persistent_workers_from_one_second_of_start_up(settings, startup, expected) -> None:
    diagnosis = diagnose_config("best", at(settings, 1000, wait=0.01, startup=startup))
    assert said(diagnosis, "persistent_workers=True") is expected


@pytest.mark.parametrize(("rate", "blamed"), [(1050, False), (1100, False), (1150, True)])
def test_more_than_10_percent_above_a_ceiling_blames_a_changing_load(rate, blamed) -> None:
    diagnosis = diagnose_config(
        "best", at(FOUR_WORKERS, rate), compute=figures(1000), data=figures(5000)
    )
    assert said(diagnosis, "a ceiling it cannot beat") is blamed


@pytest.mark.parametrize(("alone", "helps"), [(1190, False), (1200, False), (1210, True)])
def test_more_workers_help_when_alone_they_load_over_20_percent_more(alone, helps) -> None:
    diagnosis = diagnose_config(
        "best",
        at(TWO_WORKERS, 900, wait=0.5),
        compute=figures(20000),
        data=figures(1000),
        context=Context(loader_limit=limit(alone)),
    )
    assert said(diagnosis, "more workers would help") is helps


def test_the_loader_alone_at_the_same_worker_count_is_no_reason_for_more() -> None:
    eight = limit(0).settings
    diagnosis = diagnose_config(
        "best",
        at(eight, 900, wait=0.5),
        compute=figures(20000),
        data=figures(1000),
        context=Context(loader_limit=limit(2000)),
    )
    assert not said(diagnosis, "more workers")
    assert diagnosis.limit_workers == 8 and diagnosis.loader_limit == pytest.approx(2000)
    assert not any("the loader alone with" in line for line in diagnosis.evidence)


@pytest.mark.parametrize(
    ("rates", "flagged"), [((86, 100, 114), False), ((85, 100, 115), False), ((84, 100, 116), True)]
)
def test_windows_spread_over_15_percent_are_flagged(rates, flagged) -> None:
    noisy = Figures(
        windows=tuple(
            Window(index=i, seconds=1.0, samples=s, fresh=s, steps=1, wait_seconds=0.0)
            for i, s in enumerate(rates)
        )
    )
    diagnosis = diagnose_config("best", Measurement(settings=FOUR_WORKERS, figures=noisy))
    assert said(diagnosis, "read these figures as approximate") is flagged


# Echo, the figures themselves, and what each piece of advice says in full.


def test_echo_shows_the_fresh_samples_and_multiplies_every_loader_alone_figure() -> None:
    echoed = Settings(batch_size=32, num_workers=4, prefetch_factor=2, echo=2)
    diagnosis = diagnose_config(
        "best",
        Measurement(settings=echoed, figures=figures(1800, wait=0.5, echo=2)),
        compute=figures(40000),
        data=figures(1000),
        context=Context(loader_limit=limit(1200), best_loader=at(NO_WORKERS, 1500)),
    )
    assert diagnosis.evidence[0] == "echo 2: 900 fresh samples/s from the loader"
    assert diagnosis.data_ceiling == pytest.approx(2000)
    assert diagnosis.loader_limit == pytest.approx(2400)
    assert said(diagnosis, "(with 0 workers), it delivers 3,000 samples/s")
    plain = diagnose_config("best", at(FOUR_WORKERS, 1800), compute=figures(4000))
    assert not any(line.startswith("echo") for line in plain.evidence)


@pytest.mark.parametrize(
    ("echo", "max_echo", "remedy"),
    [
        (2, 2, 'echo more than 2 (space={"echo": [1, 4]})'),
        (4, 4, 'echo more than 4 (space={"echo": [1, 8]})'),
        (2, 4, "raise echo"),
        (2, None, "raise echo"),
        (1, 2, "echo batches (searched: it did not pay here)"),
        (1, 1, 'echo batches (space={"echo": [1, 2, 4]}; it changes what is learned)'),
        (1, None, 'echo batches (space={"echo": [1, 2, 4]}; it changes what is learned)'),
    ],
)
def test_loading_bound_advice_suggests_the_echo_not_yet_searched(echo, max_echo, remedy) -> None:
    settings = Settings(batch_size=32, num_workers=4, prefetch_factor=2, echo=echo)
    diagnosis = diagnose_config(
        "best",
        Measurement(settings=settings, figures=figures(900, wait=0.5, echo=echo)),
        compute=figures(40000),
        data=figures(1000),
        context=Context(searched=Searched(max_echo=max_echo)),
    )
    (advice,) = diagnosis.advice
    assert advice.startswith("loading (read, decode, augment) is the bottleneck")
    assert advice.endswith(f", or {remedy}.")


def test_a_ceiling_under_one_sample_per_second_counts_none_at_all_does_not() -> None:
    slow = diagnose_config(
        "best", at(NO_WORKERS, 0.45, seconds=100), compute=figures(0.5, seconds=100)
    )
    assert slow.compute_ceiling == pytest.approx(0.5)
    nothing = diagnose_config("best", at(NO_WORKERS, 500), compute=figures(0), data=figures(0))
    assert nothing.compute_ceiling is None and nothing.data_ceiling is None
    assert said(nothing, "the ceilings were not measured")


def test_one_ceiling_measured_is_enough_to_judge_by() -> None:
    compute = diagnose_config("best", at(FOUR_WORKERS, 3800), compute=figures(4000))
    data = diagnose_config("best", at(FOUR_WORKERS, 3800), data=figures(4000))
    for diagnosis in (compute, data):
        assert not said(diagnosis, "the ceilings were not measured")
        assert diagnosis.bound_by is None
        assert diagnosis.headline().endswith("; 95% of min(ceilings) = 4,000 samples/s")
    assert data.evidence == ("data ceiling (this loader alone, 4 workers): 4,000 samples/s",)
    one = Settings(batch_size=32, num_workers=1, prefetch_factor=2)
    single = diagnose_config("best", at(one, 3800), data=figures(4000))
    assert single.evidence == ("data ceiling (this loader alone, 1 worker): 4,000 samples/s",)


@pytest.mark.parametrize(
    ("amp", "remedy"),
    [
        ("off", "cannot make it faster; AMP (bf16/fp16), a larger batch"),
        ("bf16", "faster; a larger"),
    ],
)
def test_a_config_at_its_compute_ceiling_reads_in_full(amp, remedy) -> None:
    settings = dataclasses.replace(FOUR_WORKERS, amp=amp)
    diagnosis = diagnose_config("best", at(settings, 3800), compute=figures(4000))
    (advice,) = diagnosis.advice
    assert advice.startswith(
        "the loader keeps up: the model trains at 95% of its compute ceiling "
        "(4,000 samples/s on batches in memory). Loader settings cannot make it faster;"
    )
    assert remedy in advice
    assert advice.endswith(" a larger batch, a faster device or a cheaper model can.")


def test_the_rest_of_the_advice_reads_in_full() -> None:
    slow_start = diagnose_config("best", at(TWO_WORKERS, 1000, wait=0.01, startup=2.5))
    assert slow_start.advice == (
        "workers take 2.5 s to start at every epoch: persistent_workers=True pays that once.",
        "the ceilings were not measured (search with ceilings=True) to tell whether a loader "
        "setting or only a change outside them can help.",
    )
    above = diagnose_config("best", at(FOUR_WORKERS, 1500), compute=figures(1000))
    assert above.advice[-1] == (
        "it measured 150% of a ceiling it cannot beat (1,000 samples/s): the two were "
        "measured at different moments and the machine's load changed between them (other "
        "processes?); measure on a quiet machine for firm figures."
    )
    noisy = Figures(
        windows=tuple(
            Window(index=i, seconds=1.0, samples=s, fresh=s, steps=1, wait_seconds=0.0)
            for i, s in enumerate((50, 100, 150))
        )
    )
    spread = diagnose_config(
        "best", Measurement(settings=FOUR_WORKERS, figures=noisy), compute=figures(100)
    )
    assert spread.advice[-1] == (
        "its windows vary by 50% (stdev / mean): read these figures as approximate; a longer "
        "window_seconds steadies them."
    )


def test_a_loading_bound_config_reads_in_full() -> None:
    diagnosis = diagnose_config(
        "best",
        at(FOUR_WORKERS, 900, wait=0.5),
        compute=figures(4000),
        data=figures(950),
        context=Context(loader_limit=limit(1000)),
    )
    assert diagnosis.advice == (
        "loading (read, decode, augment) is the bottleneck whatever the loader's settings: "
        "alone, at its best measured (with 8 workers), it delivers 1,000 samples/s while the "
        "model could train 4,000. Only changes outside the loader close that gap: preprocess "
        "offline, cache decoded data, ship smaller samples (uint8, normalised on the device), "
        'or echo batches (space={"echo": [1, 2, 4]}; it changes what is learned).',
    )
    assert "data ceiling (this loader alone, 4 workers): 950 samples/s" in diagnosis.evidence


@pytest.mark.parametrize("cpus", [None, 2])
def test_loading_and_training_competing_for_the_cpus_reads_in_full(cpus) -> None:
    one = Settings(batch_size=32, num_workers=1, prefetch_factor=2)
    diagnosis = diagnose_config(
        "best",
        at(one, 900, wait=0.5),
        compute=figures(4000),
        data=figures(3800),
        context=Context(loader_limit=limit(4000), cpus=cpus),
    )
    on_cpus = f" on {cpus} CPUs" if cpus else ""
    assert diagnosis.advice == (
        "the loader alone delivers 4,000 samples/s, enough for the model (4,000), yet beside "
        f"the training{on_cpus} this config waits: loading and training compete for the "
        "CPUs. Cheaper loading (preprocessed or cached data, augmentation on the device) "
        "helps; on a GPU, pin_memory speeds the copy.",
    )
    # Without workers, the advice is to start some, not that workers compete.
    none = diagnose_config(
        "default loader",
        at(NO_WORKERS, 900, wait=0.5),
        compute=figures(4000),
        data=figures(3800),
        context=Context(loader_limit=limit(4000)),
    )
    assert len(none.advice) == 1 and said(none, "(num_workers=0)")


def test_more_workers_already_searched_reads_in_full() -> None:
    diagnosis = diagnose_config(
        "best",
        at(TWO_WORKERS, 900, wait=0.5),
        compute=figures(4000),
        data=figures(1000),
        context=Context(loader_limit=limit(2000), searched=Searched(max_workers=8)),
    )
    assert diagnosis.advice[0] == (
        "the loader alone with 8 workers delivers 2,000 samples/s, 2.0x this loader's 1,000 "
        "with 2 workers, yet the search trained with up to 8 workers and 2 trained fastest: beside "
        "the training, more workers cost the CPU time they save."
    )


MACHINE = Machine(cpus=2, cpu_model="x", memory_bytes=2**30, shm_bytes=None, accelerator="cpu")


def result_with(**fields: object) -> SearchResult:
    """A data-bound winner (4 workers) and default loader, every ceiling measured."""
    base: dict[str, object] = {
        "settings": FOUR_WORKERS,
        "figures": figures(900, wait=0.5),
        "device": "cpu",
        "machine": MACHINE,
        "baseline": at(NO_WORKERS, 300, wait=0.6),
        "ceilings": {"compute": figures(4000), "data": figures(950)},
        "baseline_ceilings": {"compute": figures(3000), "data": figures(500)},
        "loader_limit": limit(1000),
        "space": {"num_workers": {"low": 0, "high": 8}, "echo": {"choices": [1, 2]}},
    }
    return SearchResult(**{**base, **fields})  # type: ignore[arg-type]


def test_a_results_diagnoses_use_its_machine_space_and_figures() -> None:
    best, default = diagnose(result_with())
    for diagnosis in (best, default):
        # Its CPUs, the loader alone at 8 workers, and the echo its space searched.
        assert said(diagnosis, "(with 8 workers on 2 CPUs), it delivers 1,000 samples/s")
        assert said(diagnosis, "or echo batches (searched: it did not pay here).")
        assert diagnosis.loader_limit == pytest.approx(1000) and diagnosis.limit_workers == 8
    assert best.data_ceiling == pytest.approx(950)
    assert default.data_ceiling == pytest.approx(500)


def test_each_diagnosis_judges_the_loader_by_the_best_loader_alone_of_the_search() -> None:
    fast = {"compute": figures(40000)}
    # The winner's loader alone delivered the most: the default is judged by it too.
    winner = result_with(
        ceilings={**fast, "data": figures(5000)}, baseline_ceilings={**fast, "data": figures(500)}
    )
    for diagnosis in diagnose(winner):
        assert said(diagnosis, "(with 4 workers on 2 CPUs), it delivers 5,000 samples/s")
    # The default's did: the winner is judged by it.
    default = result_with(
        ceilings={**fast, "data": figures(950)}, baseline_ceilings={**fast, "data": figures(6000)}
    )
    for diagnosis in diagnose(default):
        assert said(diagnosis, "(with 0 workers on 2 CPUs), it delivers 6,000 samples/s")
    # Without a default loader measured, its ceilings do not count.
    (alone,) = diagnose(
        result_with(
            baseline=None,
            ceilings={**fast, "data": figures(950)},
            baseline_ceilings={"data": figures(6000)},
        )
    )
    assert said(alone, "(with 8 workers on 2 CPUs), it delivers 1,000 samples/s")


def test_a_result_without_any_loader_alone_figure_is_diagnosed_too() -> None:
    best, default = diagnose(
        result_with(loader_limit=None, ceilings={"compute": figures(4000)}, baseline_ceilings={})
    )
    assert best.data_ceiling is None and best.loader_limit is None
    assert not said(best, "whatever the loader's settings")
    assert said(default, "the ceilings were not measured")


def test_loader_alone_figures_under_one_sample_per_second_count() -> None:
    # A large model: every figure below one sample/s; the default's loader alone the best.
    slow = {"seconds": 100.0}
    result = result_with(
        figures=figures(0.4, wait=0.5, **slow),
        baseline=at(NO_WORKERS, 0.3, wait=0.6, **slow),
        ceilings={"compute": figures(10, **slow), "data": figures(0.5, **slow)},
        baseline_ceilings={"compute": figures(10, **slow), "data": figures(0.8, **slow)},
        loader_limit=limit(0.6, **slow),
    )
    best, _ = diagnose(result)
    assert said(best, "(with 0 workers on 2 CPUs), it delivers 0.8 samples/s")


def test_a_copy_of_exactly_five_percent_gets_no_line() -> None:
    # One window, so the share is 0.05 exactly (three windows' sum would round above it).
    window = Window(index=0, seconds=1.0, samples=1000, fresh=1000, steps=31,
                    wait_seconds=0.02, copy_seconds=0.05)  # fmt: skip
    measured = Measurement(settings=NO_WORKERS, figures=Figures(windows=(window,), startup_s=0.1))
    assert measured.figures.copy_fraction == 0.05
    diagnosis = diagnose_config("best", measured, context=Context(device="cuda:0"))
    assert copy_lines(diagnosis) == []


@pytest.mark.parametrize(
    ("share", "shown"), [(0.045, False), (0.049, False), (0.055, True), (0.2, True)]
)
def test_the_copy_line_starts_just_past_five_percent(share: float, shown: bool) -> None:
    # Literal shares, not ones derived from COPY_MATTERS, so moving it is noticed.
    diagnosis = diagnose_config(
        "best", copying(NO_WORKERS, share), context=Context(device="cuda:0")
    )
    lines = [a for a in diagnosis.advice if a.startswith("host-to-device copy")]
    assert bool(lines) is shown


@pytest.mark.parametrize(
    ("device", "pin_advice"),
    [
        ("cuda:0", True),
        ("cuda", True),
        ("xpu:1", True),
        ("cpu", False),
        ("cpu:0", False),
        (None, False),
    ],
)
def test_pinning_is_advised_only_for_an_accelerator(device: str | None, pin_advice: bool) -> None:
    diagnosis = diagnose_config("best", copying(NO_WORKERS, 0.2), context=Context(device=device))
    (line,) = [a for a in diagnosis.advice if a.startswith("host-to-device copy")]
    assert ("pin_memory=True would shorten it" in line) is pin_advice
    assert ("smaller samples" in line) is not pin_advice


def test_diagnose_passes_the_results_device() -> None:
    measured = copying(NO_WORKERS, 0.2)
    result = SearchResult(
        settings=measured.settings,
        figures=measured.figures,
        baseline=copying(NO_WORKERS, 0.3),
        device="cuda:0",
        machine=Machine(
            cpus=2, cpu_model="x", memory_bytes=2**30, shm_bytes=None, accelerator="cuda"
        ),
    )
    best, default = diagnose(result)
    for diagnosis in (best, default):
        assert any("pin_memory=True would shorten it" in a for a in diagnosis.advice)


def test_a_config_without_a_loader_alone_figure_of_its_own_is_judged_by_the_best() -> None:
    # Its own data ceiling was not measured (a pruned config's): the search's best loader
    # alone still judges it, and the missing figure is not ranked against it.
    diagnosis = diagnose_config(
        "best",
        at(FOUR_WORKERS, 3_000, wait=0.5),
        compute=figures(24_000),
        context=Context(best_loader=at(NO_WORKERS, 5_000)),
    )
    assert diagnosis.data_ceiling is None
    assert said(diagnosis, "(with 0 workers), it delivers 5,000 samples/s")
