"""The bench's figures are issue #19's targets, each read from the raw measurements: a
baseline may come from another scenario of the same run, and a value from inside a nested
result."""

from __future__ import annotations

from bench.report import FIGURES, figures


def test_every_service_running_is_set_against_the_gateway_alone_of_the_same_run() -> None:
    scenarios = {
        "write_gateway": {"commands_per_s": 3000.0, "occ_plain_publish_per_s": 30000.0},
        "write_all_services": {
            "commands_per_s": 1800.0,
            "occ_plain_publish_per_s": 30000.0,
            "projector_caught_up_after_last_reply_s": 0.2,
        },
    }
    out = figures(scenarios)
    assert out["write_all_services"]["baseline"] == 3000.0
    assert out["write_all_services"]["ratio"] == 0.6
    assert out["write_all_services"]["met"] is True
    assert out["write_gateway"]["ratio"] == 0.1 and out["write_gateway"]["met"] is False
    late = {**scenarios["write_all_services"], "projector_caught_up_after_last_reply_s": 1.5}
    assert figures({**scenarios, "write_all_services": late})["write_all_services"]["met"] is False
    # Without the gateway-alone scenario in the run there is no baseline, so no ratio.
    alone = figures({"write_all_services": scenarios["write_all_services"]})
    assert alone["write_all_services"]["ratio"] is None
    assert alone["write_all_services"]["met"] is False


def test_the_providers_target_is_its_own_cpu_per_runtime_event() -> None:
    def run(ms: float) -> dict[str, object]:
        result = {"cpu_ms_per_runtime_event": {"providers": ms, "total": 1.3}}
        return figures({"providers": result})["providers_cpu"]

    assert run(0.25)["met"] is True and run(0.25)["value"] == 0.25
    assert run(0.26)["met"] is False
    assert figures({"providers": {"ratio": 0.7}}) == {}


def test_the_targets_are_those_of_issue_19() -> None:
    targets = {figure.key: (figure.target, figure.op) for figure in FIGURES}
    assert targets["write_gateway"] == (0.25, ">=")
    assert targets["write_gateway_vs_null"] == (0.5, ">=")
    assert targets["write_all_services"] == (0.6, ">=")
    assert targets["projector_catch_up_10k"] == (1.0, ">=")
    assert targets["projector_catch_up_100k"] == (0.6, ">=")
    assert targets["projector_peak_rss_100k"] == (250, "<=")
    assert targets["verify_projection_100k"] == (0.5, ">=")
    assert targets["rebuild"] == (0.6, ">=")
    assert targets["rebuild_peak_rss"] == (300, "<=")
    assert targets["replay_locality"] == (1.2, "<=")
    assert targets["inject_visible_p99"] == (10, "<=")
    assert targets["providers_cpu"] == (0.25, "<=")
