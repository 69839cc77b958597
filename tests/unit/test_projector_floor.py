"""The layers of `bench.projector_floor` do the work they are named for: each accepts every
event of a small benchmark log in stream order, and the chain-checking ones refuse a log
whose chain is broken, so a figure quoted for them is a figure for real checks."""

from __future__ import annotations

import msgspec
import pytest

from bench.fold_profile import build_log
from bench.projector_floor import LAYERS


def _log() -> list[tuple[str, bytes, int]]:
    return build_log(20, 4.6, 10)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_every_layer_accepts_the_log_in_stream_order(layer: str) -> None:
    work = LAYERS[layer]()
    for subject, data, seq in _log():
        work(data, subject, seq)


@pytest.mark.parametrize("layer", ["validate_msgspec_chain", "core_in_memory"])
def test_the_chain_checking_layers_refuse_an_event_whose_link_does_not_follow(layer: str) -> None:
    log = _log()
    subject, data, seq = log[30]
    # One hex digit of the link changed: valid JSON and a valid event, a broken chain.
    at = data.index(b'"chain":"') + len(b'"chain":"')
    flipped = b"0" if data[at : at + 1] != b"0" else b"1"
    broken = data[:at] + flipped + data[at + 1 :]
    work = LAYERS[layer]()
    for subject_before, data_before, seq_before in log[:30]:
        work(data_before, subject_before, seq_before)
    with pytest.raises(RuntimeError):
        work(broken, subject, seq)


def test_the_msgspec_layer_refuses_an_event_the_contract_refuses() -> None:
    subject, data, seq = _log()[0]
    with pytest.raises(msgspec.ValidationError):
        LAYERS["validate_msgspec"]()(data.replace(b'"kind"', b'"kinds"'), subject, seq)
