"""The decode of a stored event, today's path beside msgspec: µs per event, no NATS.

    python -m bench.decode_floor [--sessions 300] [--rounds 7]

Issue #19 left the decode open: "validation of every event is required (§6.4); how it is
done is open. A new dependency is fine if it beats the current path by ≥ 3× on the decode
and each model is still defined once." This measures that bar on the catch-up benchmarks'
own events (the deterministic interleaved log of `bench.fold_profile`): orjson's parse, the
pydantic validation of the parsed envelope (`Event.model_validate`, what the projector runs
after its parse), both together as `contracts.decode` does from bytes, and pydantic's own
JSON path (`Event.model_validate_json`); beside them the msgspec mirror of
`bench.msgspec_mirror`, from the bytes (`decode`) and from the parsed dict (`convert`), and
the one way to keep the pydantic models as the only definition while msgspec validates:
the mirror's `convert`, then the same `Event` built without a second validation
(`model_construct`, payload and nested models included; checked equal to the validated one).

Before timing, both must accept every event of the log and refuse each broken copy in
`BROKEN` (an unknown field, a bound, a blank body, a payload of another kind...), so the two
do comparable work. Each figure is the best and the median of `--rounds` passes over the
log, in this process's CPU time; results go to bench/results/decode_floor.json.
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson
from pydantic import ValidationError

from bench import msgspec_mirror
from bench.common import emit
from bench.fold_profile import build_log
from contracts.decode import DecodeError, decode
from contracts.events import PAYLOADS, Event, RenderSummary
from contracts.spec import ResolvedSpec

Envelope = dict[str, Any]


def _set(path: str, value: Any) -> Callable[[Envelope], bool]:
    """A breakage: the dotted `path` of the first event of the right kind set to `value`."""
    *parents, last = path.split(".")

    def apply(envelope: Envelope) -> bool:
        target: Any = envelope
        for part in parents:
            if not isinstance(target, dict) or part not in target:
                return False
            target = target[part]
        target[last] = value
        return True

    return apply


#: (what is broken, the kind of event it is applied to, how).
BROKEN: tuple[tuple[str, str, Callable[[Envelope], bool]], ...] = (
    ("unknown envelope field", "injected", _set("extra", 1)),
    ("session_seq 0", "fired", _set("session_seq", 0)),
    ("negative turn", "post_turn", _set("turn", -1)),
    ("unknown kind", "deduped", _set("kind", "renamed")),
    ("unknown payload field", "injected", _set("payload.extra", True)),
    ("blank body", "injected", _set("payload.reminder.body", "   ")),
    ("33 tags", "injected", _set("payload.reminder.tags", ["t"] * 33)),
    ("control character in an id", "injected", _set("payload.reminder.id", "a\u0001b")),
    ("a format not in the set", "delivered", _set("payload.format", "html")),
    ("a fired payload under kind deduped", "fired", _set("kind", "deduped")),
    ("a count as text", "post_turn", _set("payload.expired_count", "two")),
    ("no chain", "delivered", lambda envelope: envelope.pop("chain", None) is not None),
)


def _pydantic_refuses(envelope: Envelope) -> bool:
    try:
        decode(envelope)
    except DecodeError:
        return True
    return False


def _msgspec_refuses(envelope: Envelope) -> bool:
    try:
        msgspec_mirror.decode(orjson.dumps(envelope))
    except (ValueError, TypeError):  # msgspec.ValidationError is a ValueError
        return True
    return False


def validated_then_constructed(envelope: Envelope) -> Event:
    """The envelope validated by the msgspec mirror, then built as the pydantic `Event`
    without validating it again (what the fold reads would stay the contract's models)."""
    msgspec_mirror.convert(envelope)
    payload = dict(envelope["payload"])
    if "reminder" in payload:
        payload["reminder"] = ResolvedSpec.model_construct(**payload["reminder"])
    if payload.get("summary") is not None:
        payload["summary"] = RenderSummary.model_construct(**payload["summary"])
    built = PAYLOADS[envelope["kind"]].model_construct(**payload)
    return Event.model_construct(**{**envelope, "payload": built})


def check_agreement(envelopes: list[Envelope]) -> list[str]:
    """Every event accepted by both, each `BROKEN` copy refused by both; the breakages
    checked (raises AssertionError on a disagreement)."""
    for envelope in envelopes:
        event = Event.model_validate(envelope)
        msgspec_mirror.convert(envelope)
        assert validated_then_constructed(envelope) == event
    checked = []
    for name, kind, breakage in BROKEN:
        original = next(e for e in envelopes if e["kind"] == kind)
        broken = copy.deepcopy(original)
        assert breakage(broken), name
        assert _pydantic_refuses(broken), f"pydantic accepts: {name}"
        assert _msgspec_refuses(broken), f"msgspec accepts: {name}"
        checked.append(name)
    return checked


def timed(function: Callable[[Any], object], inputs: list[Any], rounds: int) -> dict[str, float]:
    """Best and median µs per input over `rounds` passes (this process's CPU)."""
    passes = []
    for _ in range(rounds):
        gc.collect()
        started = time.process_time()
        for item in inputs:
            function(item)
        passes.append((time.process_time() - started) / len(inputs) * 1e6)
    return {"best_us": round(min(passes), 2), "median_us": round(statistics.median(passes), 2)}


def measure(sessions: int, rounds: int) -> dict[str, Any]:
    """The figures and the agreement checks on the log of `sessions` sessions."""
    data = [message[1] for message in build_log(sessions, 4.6, 60)]
    parsed: list[Envelope] = [orjson.loads(item) for item in data]
    checked = check_agreement(parsed)
    figures = {
        "orjson_parse": timed(orjson.loads, data, rounds),
        "pydantic_validate_dict": timed(Event.model_validate, parsed, rounds),
        "contracts_decode_bytes": timed(decode, data, rounds),
        "pydantic_validate_json_bytes": timed(Event.model_validate_json, data, rounds),
        "msgspec_decode_bytes": timed(msgspec_mirror.decode, data, rounds),
        "msgspec_convert_dict": timed(msgspec_mirror.convert, parsed, rounds),
        "msgspec_convert_then_construct": timed(validated_then_constructed, parsed, rounds),
    }
    kinds: dict[str, int] = {}
    for envelope in parsed:
        kinds[envelope["kind"]] = kinds.get(envelope["kind"], 0) + 1

    def ratio(today: str, candidate: str) -> float:
        return round(figures[today]["best_us"] / figures[candidate]["best_us"], 2)

    return {
        "events": len(data),
        "mean_bytes": round(sum(map(len, data)) / len(data)),
        "kinds": kinds,
        "refused_by_both": checked,
        "figures": figures,
        "decode_bytes_ratio": ratio("contracts_decode_bytes", "msgspec_decode_bytes"),
        "validate_dict_ratio": ratio("pydantic_validate_dict", "msgspec_convert_dict"),
        "construct_ratio": ratio("pydantic_validate_dict", "msgspec_convert_then_construct"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    try:
        result = measure(args.sessions, args.rounds)
    except ValidationError as exc:  # a log event the pydantic models refuse: a bug, loud
        raise SystemExit(f"decode_floor: the log does not validate: {exc}") from None
    emit("decode_floor", {"sessions": args.sessions, "rounds": args.rounds, **result})


if __name__ == "__main__":
    main()
