"""Helpers for scripts/validate-chart.sh, run with the .venv python (PyYAML and jsonschema come
with kubernetes-validate).

  split RENDERED CORE_OUT CRD_OUT   core kinds to CORE_OUT, custom resources to CRD_OUT
  kinds RENDERED                    one line: Kind(count) ... of the rendered manifests
  crd CRD_FILE SCHEMA_DIR           validate custom resources against SCHEMA_DIR/<kind>-<group>-<version>.json;
                                    a custom resource without a vendored schema is an error

Exits non-zero on any problem; never skips a manifest.
"""

import collections
import json
import os
import sys

import jsonschema
import yaml

# API groups whose kinds kubernetes-validate knows (core Kubernetes).
CORE_GROUPS = {
    "",
    "apps",
    "autoscaling",
    "batch",
    "policy",
    "networking.k8s.io",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
}


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def group_version(api_version):
    if "/" in api_version:
        return tuple(api_version.split("/", 1))
    return "", api_version


def main(argv):
    cmd = argv[1]
    if cmd == "split":
        docs = load(argv[2])
        if not docs:
            print(f"{argv[2]}: no manifests rendered", file=sys.stderr)
            return 1
        core = [d for d in docs if group_version(d["apiVersion"])[0] in CORE_GROUPS]
        crd = [d for d in docs if group_version(d["apiVersion"])[0] not in CORE_GROUPS]
        for path, part in ((argv[3], core), (argv[4], crd)):
            with open(path, "w") as f:
                yaml.safe_dump_all(part, f, sort_keys=False)
        return 0
    if cmd == "kinds":
        counts = collections.Counter(d["kind"] for d in load(argv[2]))
        print(" ".join(f"{k}({n})" for k, n in sorted(counts.items())))
        return 0
    if cmd == "crd":
        rc = 0
        for d in load(argv[2]):
            group, version = group_version(d["apiVersion"])
            name = f"{d['kind'].lower()}-{group}-{version}.json"
            path = os.path.join(argv[3], name)
            what = f"{d['kind']}/{d['metadata']['name']}"
            if not os.path.exists(path):
                print(f"ERROR {what}: no vendored schema {path}", file=sys.stderr)
                rc = 1
                continue
            with open(path) as f:
                schema = json.load(f)
            errors = list(jsonschema.Draft202012Validator(schema).iter_errors(d))
            for e in errors:
                where = ".".join(str(p) for p in e.absolute_path)
                print(f"ERROR {what}: {where}: {e.message}", file=sys.stderr)
            rc |= 1 if errors else 0
        return rc
    print(f"unknown command {cmd}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
