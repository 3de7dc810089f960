"""The dcgm-exporter parser on real scrapes (tests/fixtures/dcgm/) and on broken input."""

from pathlib import Path

import pytest

from gpumetrics.parsing import DeviceKey, parse_scrape, readings_from_vectors
from gpumetrics.series import FB_USED, GR_ACTIVE, POWER, TENSOR, UTIL, row_from_fields

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"
A100 = (FIXTURES / "a100-whole-gpu-plus-mig-1g.5gb-instance_nvidia-docs.prom").read_text()
T4 = (FIXTURES / "t4-whole-gpu-legacy-labels-plus-a10g-pod-labels_datadog-fixture.prom").read_text()


def test_nvidia_docs_scrape_has_a_whole_gpu_and_a_mig_instance_without_help_lines():
    result = parse_scrape(A100)
    whole = DeviceKey("ub20-a100-k8s", "GPU-34319582-d595-d1c7-d1d2-179bcfa61660", "")
    mig = DeviceKey("ub20-a100-k8s", "GPU-34319582-d595-d1c7-d1d2-179bcfa61660", "13")
    assert set(result.devices) == {whole, mig}
    assert result.devices[whole].fields[POWER] == pytest.approx(409.692)
    assert result.devices[whole].fields[FB_USED] == 4845
    instance = result.devices[mig]
    assert instance.gi_profile == "1g.5gb"
    assert instance.fields[GR_ACTIVE] == pytest.approx(0.995687)
    assert UTIL not in instance.fields  # MIG instances have no GPU_UTIL series
    assert result.skipped_lines == 0
    # a MIG instance's utilisation is its graphics-engine activity, as a percent
    row = row_from_fields(instance.fields, mig=True)
    assert row[0] == pytest.approx(99.5687, rel=1e-4)
    assert row[1] == pytest.approx(93.0433, rel=1e-4)


def test_datadog_scrape_with_legacy_labels_and_label_free_samples():
    result = parse_scrape(T4)
    nodes = {key.node for key in result.devices}
    # two exporter versions' label sets; the A10G only has DRAM_ACTIVE, which is not read
    assert nodes == {"424773df46e0", "551bdf382151"}
    t4 = next(d for d in result.devices.values() if d.key.node == "424773df46e0")
    assert t4.model == "Tesla T4"
    assert t4.fields[UTIL] == 0
    assert t4.pod == ""
    # samples without any labels have no device identity: counted and skipped, not fatal
    assert result.skipped_lines >= 1
    assert all("without a UUID" in e for e in result.errors)


def test_pod_labels_of_the_datadog_a10g_line():
    line = next(x for x in T4.splitlines() if 'pod="' in x)
    text = line.replace("DCGM_FI_PROF_DRAM_ACTIVE", TENSOR) + "\n"
    (device,) = parse_scrape(text).devices.values()
    labels = (device.namespace, device.pod, device.container)
    assert labels == ("ray-llm", "ray-1111111", "ray-worker")
    assert device.key == DeviceKey("ip-11111", "GPU-abc", "")


def test_a_bad_line_costs_that_line_only():
    lines = A100.splitlines()
    broken = []
    for line in lines:
        broken.append(line)
        if line.startswith("DCGM_FI_DEV_POWER_USAGE"):
            broken.append(line.replace("409.692000", "ERROR: no data"))  # error string value
            broken.append('DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-x" 61')  # unterminated labels
            broken.append("DCGM_FI_DEV_FB_USED{gpu=0} 12")  # unquoted label value
            broken.append("# TYPE DCGM_FI_DEV_FB_USED nonsense")
    result = parse_scrape("\n".join(broken) + "\n")
    clean = parse_scrape(A100)
    assert result.skipped_lines == 3
    assert result.samples == clean.samples
    for key, device in clean.devices.items():
        assert result.devices[key].fields == device.fields


def test_garbage_and_empty_input_do_not_raise():
    assert parse_scrape("").devices == {}
    result = parse_scrape("\x00\x01 not prometheus at all\nDCGM_FI_DEV_GPU_UTIL{{{ 1\n")
    assert result.devices == {}
    assert result.skipped_lines == 1


def test_nan_readings_leave_a_gap_not_an_error():
    text = (
        'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-1",Hostname="n"} NaN\n'
        'DCGM_FI_DEV_POWER_USAGE{UUID="GPU-1",Hostname="n"} 70\n'
    )
    result = parse_scrape(text)
    device = result.devices[DeviceKey("n", "GPU-1")]
    assert device.fields == {POWER: 70.0}
    assert result.skipped_lines == 0


def test_label_sets_seen_before_are_reused_but_values_still_checked():
    text = A100.replace("409.692000", "oops")
    parse_scrape(A100)  # the label sets are now known
    result = parse_scrape(text)
    assert result.skipped_lines == 1
    assert POWER not in next(iter(result.devices.values())).fields


def test_prometheus_vectors_give_the_same_readings():
    direct = parse_scrape(A100)
    vectors = []
    for device in direct.devices.values():
        for name, value in device.fields.items():
            labels = {"__name__": name, "UUID": device.key.uuid, "Hostname": device.key.node}
            if device.key.gi_id:
                labels |= {"GPU_I_ID": device.key.gi_id, "GPU_I_PROFILE": device.gi_profile}
            vectors.append((labels | {"instance": "x", "job": "dcgm"}, value))
    via = readings_from_vectors(vectors)
    assert {k: d.fields for k, d in via.devices.items()} == {
        k: d.fields for k, d in direct.devices.items()
    }
    key = DeviceKey("ub20-a100-k8s", "GPU-34319582-d595-d1c7-d1d2-179bcfa61660")
    assert TENSOR in via.devices[key].fields
