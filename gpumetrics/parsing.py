"""Parse a dcgm-exporter scrape into per-device readings. Pure: text in, readings out.

Uses prometheus_client's text-format parser, but never on the whole scrape at once: that parser
stops at the first bad line, and real exporters print lines it rejects (a field whose value is an
error string, a broken label set). So the text is first split by metric family (only the fields
the portal reads, see gpumetrics.series), each family is parsed on its own, and a family that
fails is re-parsed line by line: a bad line costs that line only, and is counted.

Label differences between exporter versions are absorbed here: `Hostname` or `hostname`,
`pod`/`namespace`/`container` or the 1.x `pod_name`/`pod_namespace`/`container_name`, optional
`DCGM_FI_DRIVER_VERSION`, `modelName` and `pod_uid`. MIG instances carry `GPU_I_ID` and
`GPU_I_PROFILE` next to the parent GPU's `UUID`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from gpumetrics.series import WANTED_FIELDS


@dataclass(frozen=True)
class DeviceKey:
    """A whole GPU (gi_id "") or one MIG GPU instance of it, on a node."""

    node: str
    uuid: str
    gi_id: str = ""

    @property
    def is_mig(self) -> bool:
        return self.gi_id != ""

    def __str__(self) -> str:
        return f"{self.uuid}/gi{self.gi_id}" if self.gi_id else self.uuid


@dataclass
class DeviceReading:
    key: DeviceKey
    gpu_index: str = ""
    model: str = ""
    gi_profile: str = ""
    namespace: str = ""
    pod: str = ""
    container: str = ""
    fields: dict[str, float] = field(default_factory=dict)


@dataclass
class ParseResult:
    devices: dict[DeviceKey, DeviceReading] = field(default_factory=dict)
    samples: int = 0  # samples of the wanted fields kept
    skipped_lines: int = 0  # lines that could not be parsed (or had no device identity)
    errors: list[str] = field(default_factory=list)  # the first few reasons, for the log

    def note(self, reason: str) -> None:
        self.skipped_lines += 1
        if len(self.errors) < 10:
            self.errors.append(reason)


# Label sets already parsed by prometheus_client (label text -> labels), across scrapes of this
# process: a device keeps its label set from one scrape to the next. Bounded; cleared when full.
_LABELS_SEEN: dict[str, dict[str, str]] = {}
_LABELS_SEEN_MAX = 100_000


def _parse_block(lines: list[str]) -> list:
    return [
        sample
        for family in text_string_to_metric_families("\n".join(lines) + "\n")
        for sample in family.samples
    ]


def _parse_line(name: str, line: str, result: ParseResult) -> list:
    """Samples of one line through prometheus_client's parser; [] (and counted) if it fails."""
    try:
        return _parse_block([line])
    except Exception as exc:  # the parser raises ValueError/TypeError/IndexError alike
        result.note(f"{name}: {exc.__class__.__name__}: {line[:160]}")
        return []


def _device_for(result: ParseResult, name: str, labels: dict[str, str]) -> DeviceReading | None:
    uuid = labels.get("UUID") or labels.get("uuid") or ""
    if not uuid:
        result.note(f"{name}: sample without a UUID label")
        return None
    node = labels.get("Hostname") or labels.get("hostname") or labels.get("kubernetes_node") or ""
    key = DeviceKey(node, uuid, labels.get("GPU_I_ID") or "")
    device = result.devices.get(key)
    if device is None:
        device = result.devices[key] = DeviceReading(
            key=key,
            gpu_index=labels.get("gpu", ""),
            model=labels.get("modelName", ""),
            gi_profile=labels.get("GPU_I_PROFILE", ""),
        )
    pod = labels.get("pod") or labels.get("pod_name") or ""
    if pod and not device.pod:
        device.pod = pod
        device.namespace = labels.get("namespace") or labels.get("pod_namespace") or ""
        device.container = labels.get("container") or labels.get("container_name") or ""
    return device


def _usable(value: float | None) -> bool:
    # "no reading" (NaN) is not an error; the stored series just has a gap
    return value is not None and not math.isnan(value) and not math.isinf(value)


def _store_value(
    result: ParseResult, device: DeviceReading, name: str, text: str, line: str
) -> None:
    try:
        value = float(text)
    except ValueError:
        result.note(f"{name}: not a number: {line[:160]}")
        return
    if _usable(value):
        device.fields[name] = value
        result.samples += 1


def parse_scrape(text: str, result: ParseResult | None = None) -> ParseResult:
    """Readings per device from one exporter's /metrics text (added to `result` if given).

    Speed: dcgm-exporter repeats one device's label set on every field, so each distinct label
    set goes through prometheus_client's parser once; later lines with exactly the same label
    text only need their value converted (float(), as that parser does). Everything unusual —
    a new label set, a line of another shape — takes the parser's path.
    """
    result = result if result is not None else ParseResult()
    devices_by_label_text: dict[str, DeviceReading] = {}
    wanted = WANTED_FIELDS
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] == "#":
            continue  # HELP/TYPE are optional and change nothing for gauges and counters
        brace = line.find("{")
        name = line[:brace] if brace > 0 else line.split(None, 1)[0]
        if name not in wanted:
            continue  # families the portal does not read are never parsed
        close = line.rfind("}")
        label_text = line[brace + 1 : close] if 0 < brace < close else None
        device = None
        if label_text is not None:
            device = devices_by_label_text.get(label_text)
            if device is None and label_text in _LABELS_SEEN:
                # A label set prometheus_client already parsed in an earlier scrape.
                device = _device_for(result, name, _LABELS_SEEN[label_text])
                if device is not None:
                    devices_by_label_text[label_text] = device
        if device is not None:
            rest = line[close + 1 :].split()
            if 1 <= len(rest) <= 2:  # value [timestamp]
                _store_value(result, device, name, rest[0], line)
                continue
        for sample in _parse_line(name, line, result):
            device = _device_for(result, sample.name, sample.labels)
            if device is None:
                continue
            if label_text is not None and label_text not in devices_by_label_text:
                devices_by_label_text[label_text] = device
                if len(_LABELS_SEEN) >= _LABELS_SEEN_MAX:
                    _LABELS_SEEN.clear()
                _LABELS_SEEN[label_text] = dict(sample.labels)
            if _usable(sample.value):
                device.fields[sample.name] = float(sample.value)
                result.samples += 1
    return result


def readings_from_vectors(
    vectors: Iterable[tuple[dict[str, str], float]], result: ParseResult | None = None
) -> ParseResult:
    """The same readings from already-parsed samples (labels incl. __name__, value), e.g. a
    Prometheus instant query."""
    result = result if result is not None else ParseResult()
    for labels, value in vectors:
        name = labels.get("__name__", "")
        if name not in WANTED_FIELDS or not _usable(value):
            continue
        device = _device_for(result, name, labels)
        if device is not None:
            device.fields[name] = float(value)
            result.samples += 1
    return result
