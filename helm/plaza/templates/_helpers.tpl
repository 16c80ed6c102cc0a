{{/* Names, labels and shared pod pieces of the Plaza chart. */}}

{{- define "plaza.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: <release>-<chart> unless the release name already contains the chart name. */}}
{{- define "plaza.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "plaza.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "plaza.labels" -}}
helm.sh/chart: {{ include "plaza.chart" . }}
{{ include "plaza.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "plaza.selectorLabels" -}}
app.kubernetes.io/name: {{ include "plaza.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "plaza.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "plaza.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "plaza.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "plaza.nodeHeadless" -}}
{{- printf "%s-node" (include "plaza.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "plaza.redisName" -}}
{{- printf "%s-redis" (include "plaza.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* One TOML value: strings as JSON strings (valid TOML basic strings), whole numbers without a
     fraction (Helm reads YAML numbers as float64), booleans as is. */}}
{{- define "plaza.tomlValue" -}}
{{- if kindIs "string" . }}{{ toJson . }}
{{- else if kindIs "bool" . }}{{ . }}
{{- else if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) }}
{{- if eq (float64 .) (floor .) }}{{ printf "%d" (int64 .) }}{{ else }}{{ . }}{{ end }}
{{- else if kindIs "slice" . }}[{{ range $i, $v := . }}{{ if $i }}, {{ end }}{{ include "plaza.tomlValue" $v }}{{ end }}]
{{- else }}{{ fail (printf "config: unsupported value %v (only strings, numbers, booleans, lists)" .) }}
{{- end }}
{{- end }}

{{/* plaza.toml from .Values.config: one [section] per map, keys sorted. */}}
{{- define "plaza.toml" -}}
# plaza.toml rendered by the Helm chart from .Values.config; per-pod keys come from
# PLAZA__SECTION__KEY environment variables, which override this file.
{{- range $section, $keys := .Values.config }}

[{{ $section }}]
{{- range $key, $value := $keys }}
{{ $key }} = {{ include "plaza.tomlValue" $value }}
{{- end }}
{{- end }}
{{- range $rule := .Values.rooms }}

[[rooms]]
{{- range $key, $value := $rule }}
{{ $key }} = {{ include "plaza.tomlValue" $value }}
{{- end }}
{{- end }}
{{ end }}

{{/* The Redis URL env var of both roles (with the bundled Redis's password from its Secret). */}}
{{- define "plaza.redisEnv" -}}
{{- if .Values.redis.enabled }}
{{- if .Values.redis.auth.enabled }}
- name: PLAZA_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "plaza.redisSecretName" . }}
      key: {{ .Values.redis.auth.existingSecretKey }}
- name: PLAZA__DIRECTORY__REDIS_URL
  value: {{ printf "redis://:$(PLAZA_REDIS_PASSWORD)@%s.%s.svc.%s:%d/0" (include "plaza.redisName" .) .Release.Namespace .Values.clusterDomain (int .Values.redis.port) | quote }}
{{- else }}
- name: PLAZA__DIRECTORY__REDIS_URL
  value: {{ printf "redis://%s.%s.svc.%s:%d/0" (include "plaza.redisName" .) .Release.Namespace .Values.clusterDomain (int .Values.redis.port) | quote }}
{{- end }}
{{- else if .Values.redis.existingSecret.name }}
- name: PLAZA__DIRECTORY__REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret.name }}
      key: {{ .Values.redis.existingSecret.key }}
{{- else if .Values.redis.url }}
- name: PLAZA__DIRECTORY__REDIS_URL
  value: {{ .Values.redis.url | quote }}
{{- else if .Values.redis.external.hosts }}
{{- $e := .Values.redis.external }}
{{- $auth := "" }}
{{- if $e.passwordSecret.name }}
{{- $auth = ":$(PLAZA_REDIS_PASSWORD)@" }}
- name: PLAZA_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $e.passwordSecret.name }}
      key: {{ $e.passwordSecret.key }}
{{- end }}
{{- $scheme := ternary "rediss" "redis" (eq $e.tls true) }}
{{- $hosts := join "," $e.hosts }}
- name: PLAZA__DIRECTORY__REDIS_URL
{{- if eq $e.mode "cluster" }}
  value: {{ printf "%s+cluster://%s%s" $scheme $auth $hosts | quote }}
{{- else if eq $e.mode "sentinel" }}
{{- if $e.tls }}
{{- fail "redis.external: tls is not supported with mode sentinel" }}
{{- end }}
{{- if not $e.sentinelService }}
{{- fail "redis.external.mode sentinel needs redis.external.sentinelService" }}
{{- end }}
  value: {{ printf "redis+sentinel://%s%s/%s" $auth $hosts $e.sentinelService | quote }}
{{- else }}
{{- if ne (len $e.hosts) 1 }}
{{- fail "redis.external.mode standalone takes one host (mode cluster or sentinel for several)" }}
{{- end }}
  value: {{ printf "%s://%s%s/%d" $scheme $auth $hosts (int $e.db) | quote }}
{{- end }}
{{- else }}
{{- fail "redis.enabled is false: set redis.url, redis.existingSecret.name or redis.external.hosts" }}
{{- end }}
{{- end }}

{{/* Probes on the admin port. */}}
{{- define "plaza.probes" -}}
startupProbe:
  httpGet:
    path: /healthz
    port: admin
  periodSeconds: {{ .Values.probes.startup.periodSeconds }}
  timeoutSeconds: {{ .Values.probes.startup.timeoutSeconds }}
  failureThreshold: {{ .Values.probes.startup.failureThreshold }}
livenessProbe:
  httpGet:
    path: /healthz
    port: admin
  initialDelaySeconds: {{ .Values.probes.liveness.initialDelaySeconds }}
  periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
  timeoutSeconds: {{ .Values.probes.liveness.timeoutSeconds }}
  failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
readinessProbe:
  httpGet:
    path: /readyz
    port: admin
  initialDelaySeconds: {{ .Values.probes.readiness.initialDelaySeconds }}
  periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
  timeoutSeconds: {{ .Values.probes.readiness.timeoutSeconds }}
  failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
{{- end }}

{{/* Who may reach the admin port: the monitoring namespace / pods, and this release's pods. */}}
{{- define "plaza.adminPeers" -}}
- namespaceSelector:
    {{- toYaml .Values.networkPolicy.monitoring.namespaceSelector | nindent 4 }}
  {{- with .Values.networkPolicy.monitoring.podSelector }}
  podSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
- podSelector:
    matchLabels:
      {{- include "plaza.selectorLabels" . | nindent 6 }}
{{- end }}

{{- define "plaza.redisSecretName" -}}
{{- default (include "plaza.redisName" .) .Values.redis.auth.existingSecret }}
{{- end }}

{{/* The operator API token of both roles (admin.token). */}}
{{- define "plaza.adminTokenEnv" -}}
- name: PLAZA__ADMIN__TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ default (printf "%s-admin" (include "plaza.fullname" .)) .Values.adminToken.existingSecret }}
      key: {{ .Values.adminToken.existingSecretKey }}
{{- end }}

{{/* Seconds a pod needs from SIGTERM to exit: preStop sleep + the drain (nodes) + the gateway
     shutdown + 10 s margin, from the rendered config; the grace period is at least that. */}}
{{- define "plaza.nodeGrace" -}}
{{- $need := add (int .Values.node.preStopSleepSeconds) (div (add (int .Values.config.node.drain_timeout_ms) 999) 1000) (div (add (int .Values.config.gateway.shutdown_timeout_ms) 999) 1000) 10 }}
{{- max (int .Values.node.terminationGracePeriodSeconds) $need }}
{{- end }}

{{- define "plaza.gatewayGrace" -}}
{{- $need := add (int .Values.gateway.preStopSleepSeconds) (div (add (int .Values.config.gateway.shutdown_timeout_ms) 999) 1000) 10 }}
{{- max (int .Values.gateway.terminationGracePeriodSeconds) $need }}
{{- end }}

{{/* TLS settings from internalTls and redis.tlsCaSecret: environment of every Plaza pod. */}}
{{- define "plaza.tlsEnv" -}}
{{- if .Values.internalTls.secretName }}
- name: PLAZA__NODE__TLS_CERT
  value: /etc/plaza-tls/internal/tls.crt
- name: PLAZA__NODE__TLS_KEY
  value: /etc/plaza-tls/internal/tls.key
- name: PLAZA__NODE__TLS_CLIENT_CA
  value: /etc/plaza-tls/internal/ca.crt
- name: PLAZA__GATEWAY__NODE_TLS_CA
  value: /etc/plaza-tls/internal/ca.crt
- name: PLAZA__GATEWAY__NODE_TLS_CERT
  value: /etc/plaza-tls/internal/tls.crt
- name: PLAZA__GATEWAY__NODE_TLS_KEY
  value: /etc/plaza-tls/internal/tls.key
{{- end }}
{{- if .Values.redis.tlsCaSecret.name }}
- name: PLAZA__DIRECTORY__REDIS_CA
  value: {{ printf "/etc/plaza-tls/redis/%s" .Values.redis.tlsCaSecret.key | quote }}
{{- end }}
{{- end }}

{{/* Mounts of the TLS Secrets (see plaza.tlsEnv). */}}
{{- define "plaza.tlsVolumeMounts" -}}
{{- if .Values.internalTls.secretName }}
- name: internal-tls
  mountPath: /etc/plaza-tls/internal
  readOnly: true
{{- end }}
{{- if .Values.redis.tlsCaSecret.name }}
- name: redis-tls
  mountPath: /etc/plaza-tls/redis
  readOnly: true
{{- end }}
{{- end }}

{{- define "plaza.tlsVolumes" -}}
{{- with .Values.internalTls.secretName }}
- name: internal-tls
  secret:
    secretName: {{ . }}
{{- end }}
{{- with .Values.redis.tlsCaSecret.name }}
- name: redis-tls
  secret:
    secretName: {{ . }}
{{- end }}
{{- end }}
