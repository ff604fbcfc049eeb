#!/usr/bin/env python3
"""Parses a vgpu-node /metrics scrape with Prometheus' own text parser (prometheus_client) and
checks what the integration test expects.

usage: parse_metrics.py METRICS_FILE CHECKS_FILE

CHECKS_FILE has one check per line:
  family NAME TYPE          a family of that name and type exists (gauge, counter, histogram)
  sample NAME k=v,k=v OP N  a sample with (at least) those labels whose value satisfies OP N
                            (OP one of == >= <= >)
Exits 0 when the text parses and every check holds; otherwise prints every problem, exits 1.
"""
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("prometheus_client is not installed (Debian: python3-prometheus-client; run scripts/install-deps.sh)")
    sys.exit(2)


def main():
    text = open(sys.argv[1]).read()
    families = {}
    samples = []
    try:
        for family in text_string_to_metric_families(text):
            families[family.name] = family.type
            samples.extend(family.samples)
    except Exception as error:  # the parser raises ValueError and friends on bad text
        print(f"the exposition does not parse: {error!r}")
        return 1
    problems = []
    for line in open(sys.argv[2]):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if fields[0] == "family":
            name, kind = fields[1], fields[2]
            # The parser reports counters without their _total suffix.
            found = families.get(name) or families.get(name[:-6] if name.endswith("_total") else name)
            if found != kind:
                problems.append(f"family {name}: expected type {kind}, got {found}")
        elif fields[0] == "sample":
            name, labels, op, want = fields[1], fields[2], fields[3], float(fields[4])
            wanted = dict(kv.split("=", 1) for kv in labels.split(",")) if labels != "-" else {}
            values = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in wanted.items())]
            if not values:
                problems.append(f"sample {name} {labels}: none")
                continue
            ok = {"==": values[0] == want, ">=": values[0] >= want, "<=": values[0] <= want, ">": values[0] > want}[op]
            if not ok:
                problems.append(f"sample {name} {labels}: {values[0]} is not {op} {want}")
    for p in problems:
        print(p)
    print(f"parsed {len(families)} families, {len(samples)} samples; {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
