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
    if cmd == "config":
        return check_config(load(argv[2]), argv[3])
    if cmd == "expect":
        # expect FILE Kind/name-suffix ...: each named object is rendered.
        docs = load(argv[2])
        have = {f"{d['kind']}/{d['metadata']['name']}" for d in docs}
        missing = [w for w in argv[3:]
                   if not any(h.split("/")[0] == w.split("/")[0] and h.endswith(w.split("/")[1])
                              for h in have)]
        for w in missing:
            print(f"ERROR expected {w} in the rendered manifests; have {sorted(have)}",
                  file=sys.stderr)
        return 1 if missing else 0
    if cmd == "grace":
        # Every Plaza pod's terminationGracePeriodSeconds covers its stop: nodes the drain
        # (node.drain_timeout_ms) and gateways the shutdown (gateway.shutdown_timeout_ms), + 10 s.
        import tomllib
        docs = load(argv[2])
        cfg = next(tomllib.loads(d["data"]["plaza.toml"]) for d in docs
                   if d["kind"] == "ConfigMap" and "plaza.toml" in d.get("data", {}))
        rc = 0
        for d in docs:
            if d["kind"] not in ("Deployment", "StatefulSet"):
                continue
            spec = d["spec"]["template"]["spec"]
            role = spec["containers"][0].get("args", [""])[0]
            if role not in ("node", "gateway"):
                continue
            need = cfg["gateway"]["shutdown_timeout_ms"] / 1000 + 10
            if role == "node":
                need += cfg["node"]["drain_timeout_ms"] / 1000
            got = spec.get("terminationGracePeriodSeconds", 30)
            if got < need:
                print(f"ERROR {d['metadata']['name']}: terminationGracePeriodSeconds {got} < {need}",
                      file=sys.stderr)
                rc = 1
        return rc
    print(f"unknown command {cmd}", file=sys.stderr)
    return 2


def check_config(docs, plaza_bin):
    """Runs `plaza config print` on the rendered plaza.toml with each Plaza container's rendered
    environment, as the pod would: the real loader refuses unknown keys and invalid values."""
    import subprocess
    import tempfile

    configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    checked = 0
    rc = 0
    for d in docs:
        if d["kind"] not in ("Deployment", "StatefulSet"):
            continue
        spec = d["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in spec["containers"]:
            args = c.get("args", [])
            if not args or args[0] not in ("node", "gateway", "up"):
                continue
            what = f"{d['kind']}/{d['metadata']['name']}/{c['name']}"
            checked += 1
            if "--config" not in args:
                print(f"ERROR {what}: no --config", file=sys.stderr)
                rc = 1
                continue
            path = args[args.index("--config") + 1]
            mount = next(
                (m for m in c.get("volumeMounts", [])
                 if path.startswith(m["mountPath"].rstrip("/") + "/")),
                None,
            )
            cm = volumes.get(mount["name"], {}).get("configMap") if mount else None
            key = path[len(mount["mountPath"].rstrip("/")) + 1:] if mount else None
            if not cm or cm["name"] not in configmaps or key not in configmaps[cm["name"]]["data"]:
                print(f"ERROR {what}: {path} is not a mounted ConfigMap key", file=sys.stderr)
                rc = 1
                continue
            env = {"PATH": "/usr/bin:/bin"}
            pod = f"{d['metadata']['name']}-0"
            for e in c.get("env", []):
                if "value" in e:
                    value = e["value"]
                elif "fieldRef" in e.get("valueFrom", {}):
                    value = pod
                elif "secretKeyRef" in e.get("valueFrom", {}):
                    secret_key = e["valueFrom"]["secretKeyRef"]["key"]
                    value = ("redis://from-secret.invalid:6379/0" if secret_key == "url"
                             else "placeholder-from-secret")
                else:
                    print(f"ERROR {what}: env {e['name']} has no value", file=sys.stderr)
                    rc = 1
                    continue
                for k, v in env.items():
                    value = value.replace(f"$({k})", v)
                env[e["name"]] = value
            with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
                f.write(configmaps[cm["name"]]["data"][key])
                f.flush()
                out = subprocess.run(
                    [plaza_bin, "config", "print", "--config", f.name],
                    env=env, capture_output=True, text=True,
                )
                check = subprocess.run(
                    [plaza_bin, "config", "check", "--config", f.name],
                    env=env, capture_output=True, text=True,
                )
            if out.returncode != 0 or check.returncode != 0:
                print(f"ERROR {what}: plaza config print/check failed:\n{out.stderr}{check.stderr}",
                      file=sys.stderr)
                rc = 1
                continue
            for name in env:
                if not name.startswith("PLAZA__"):
                    continue
                dotted = name[len("PLAZA__"):].lower().replace("__", ".")
                line = next((l for l in out.stdout.splitlines() if l.startswith(dotted + " = ")), "")
                if not line.endswith("# env"):
                    print(f"ERROR {what}: {dotted} not taken from the environment: {line!r}",
                          file=sys.stderr)
                    rc = 1
    if checked == 0:
        print("ERROR no Plaza container found in the rendered manifests", file=sys.stderr)
        return 1
    if rc == 0:
        print(f"plaza config print accepted the rendered plaza.toml + env of {checked} containers")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
