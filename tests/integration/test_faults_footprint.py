"""A search writes its study and nothing else. Whole searches are checked in an empty
working directory with an empty HOME by tests/integration/test_faults_interrupt.py (Places); temp
files and shared memory by the autouse fixtures of every test."""

from __future__ import annotations

import sys

from faults import listing

from autotune.workload import load_config


def test_loading_a_config_leaves_no_bytecode_beside_it(write_config, monkeypatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as Python runs by default
    path = write_config("from workloads import sleepy_dataset as dataset, linear_model as model")
    load_config(path)
    assert listing(path.parent) == [path.name]
    assert sys.dont_write_bytecode is False
