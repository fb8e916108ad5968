"""Reading the dashboard's /metrics as Prometheus does: by metric name and label set, whatever their order."""

from prometheus_client.parser import text_string_to_metric_families


def families(text: str) -> dict[str, str]:
    """Each metric family's name and type."""
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """(sample name, its labels sorted) -> value, for every sample."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(text: str, name: str, **labels) -> float | None:
    """The value of ``name`` with exactly these labels (None: no such sample)."""
    return samples(text).get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))))
