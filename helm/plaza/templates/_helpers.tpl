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
{{- else }}{{ fail (printf "config: unsupported value %v (only strings, numbers, booleans)" .) }}
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
{{ end }}

{{/* The Redis URL env var of both roles. */}}
{{- define "plaza.redisEnv" -}}
- name: PLAZA__DIRECTORY__REDIS_URL
{{- if .Values.redis.enabled }}
  value: {{ printf "redis://%s.%s.svc.%s:%d/0" (include "plaza.redisName" .) .Release.Namespace .Values.clusterDomain (int .Values.redis.port) | quote }}
{{- else if .Values.redis.existingSecret.name }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret.name }}
      key: {{ .Values.redis.existingSecret.key }}
{{- else if .Values.redis.url }}
  value: {{ .Values.redis.url | quote }}
{{- else }}
{{- fail "redis.enabled is false: set redis.url or redis.existingSecret.name" }}
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
