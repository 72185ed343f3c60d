{{/*
The chart's name, and the release's full name: object names, at most 63
characters (a DNS label).
*/}}
{{- define "ratelimit-sidecar.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ratelimit-sidecar.fullname" -}}
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

{{/* Labels of every object. */}}
{{- define "ratelimit-sidecar.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "ratelimit-sidecar.selectorLabels" . }}
app.kubernetes.io/version: {{ include "ratelimit-sidecar.tag" . | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ratelimit-sidecar
{{- end }}

{{/* The labels that select the release's pods. */}}
{{- define "ratelimit-sidecar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ratelimit-sidecar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ratelimit-sidecar.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ratelimit-sidecar.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "ratelimit-sidecar.tag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{/* repository:tag, or repository@digest. */}}
{{- define "ratelimit-sidecar.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (include "ratelimit-sidecar.tag" .) }}
{{- end }}
{{- end }}

{{/*
Where the rules come from: "existing" (rules.existingConfigMap), "chart"
(rules.files, in the chart's ConfigMap) or "image" (neither: the image's
example rules in /etc/ratelimit-sidecar/).
*/}}
{{- define "ratelimit-sidecar.rulesSource" -}}
{{- if .Values.rules.existingConfigMap }}existing
{{- else if dig "files" dict .Values.rules }}chart
{{- else }}image
{{- end }}
{{- end }}

{{/* The rules ConfigMap: the chart's, or rules.existingConfigMap. */}}
{{- define "ratelimit-sidecar.rulesConfigMap" -}}
{{- default (printf "%s-rules" (include "ratelimit-sidecar.fullname" .)) .Values.rules.existingConfigMap }}
{{- end }}

{{/*
The rules ConfigMap's data; its sha256 is the pods' checksum/rules, so that
only a change of the rules, not of the chart's labels, rolls them.
*/}}
{{- define "ratelimit-sidecar.rulesData" -}}
{{- range $name, $body := dig "files" dict .Values.rules }}
{{ $name | quote }}: |
  {{- if kindIs "string" $body }}
  {{- $body | trimSuffix "\n" | nindent 2 }}
  {{- else }}
  {{- toYaml $body | trimSuffix "\n" | nindent 2 }}
  {{- end }}
{{- end }}
{{- end }}

{{/*
The divisor of failure mode local: as many as the replicas that share the
limits while Redis is away.
*/}}
{{- define "ratelimit-sidecar.divisor" -}}
{{- $d := int .Values.failureMode.localFallbackDivisor }}
{{- if gt $d 0 }}
{{- $d }}
{{- else if .Values.autoscaling.enabled }}
{{- int .Values.autoscaling.minReplicas }}
{{- else }}
{{- int .Values.replicaCount }}
{{- end }}
{{- end }}

{{/*
--memory-limit: memoryLimit, or three quarters of the container's memory
limit (Mi or Gi), or 0 (none) without one.
*/}}
{{- define "ratelimit-sidecar.memoryLimit" -}}
{{- $limit := dig "limits" "memory" "" (.Values.resources | default dict) | toString }}
{{- if .Values.memoryLimit }}
{{- .Values.memoryLimit }}
{{- else if not $limit }}
{{- "0" }}
{{- else if regexMatch "^[0-9]+Mi$" $limit }}
{{- printf "%dMiB" (div (mul (trimSuffix "Mi" $limit | int64) 3) 4) }}
{{- else if regexMatch "^[0-9]+Gi$" $limit }}
{{- printf "%dMiB" (div (mul (trimSuffix "Gi" $limit | int64) 3072) 4) }}
{{- else }}
{{- fail (printf "memoryLimit: cannot derive the Go runtime's limit from resources.limits.memory %q (only Mi and Gi are understood); set memoryLimit" $limit) }}
{{- end }}
{{- end }}

{{/*
Checks of values that the schema cannot express. Each failure names the
value to fix.
*/}}
{{- define "ratelimit-sidecar.validate" -}}
{{- $r := .Values.redis }}
{{- if eq $r.mode "standalone" }}
{{- if not $r.url }}
{{- fail "redis.url: required with redis.mode standalone (redis://host:6379/0)" }}
{{- end }}
{{- if regexMatch "^[a-z]+://[^/@]*:[^/@]*@" $r.url }}
{{- fail "redis.url: holds a password, which would show in the pod spec; put it in a Secret and set redis.auth.existingSecret" }}
{{- end }}
{{- else if eq $r.mode "sentinel" }}
{{- if not $r.sentinel.masterName }}
{{- fail "redis.sentinel.masterName: required with redis.mode sentinel" }}
{{- end }}
{{- if not $r.sentinel.addrs }}
{{- fail "redis.sentinel.addrs: required with redis.mode sentinel" }}
{{- end }}
{{- else if eq $r.mode "cluster" }}
{{- if not $r.cluster.addrs }}
{{- fail "redis.cluster.addrs: required with redis.mode cluster" }}
{{- end }}
{{- end }}
{{- if and $r.tls.existingSecret (not (or $r.tls.caKey $r.tls.certKey)) }}
{{- fail "redis.tls.existingSecret: set redis.tls.caKey, or certKey and keyKey, to say which of its keys to use" }}
{{- end }}
{{- if or $r.tls.caKey $r.tls.certKey $r.tls.keyKey }}
{{- if not $r.tls.existingSecret }}
{{- fail "redis.tls.existingSecret: required with redis.tls.caKey, certKey or keyKey" }}
{{- end }}
{{- end }}
{{- if and $r.tls.existingSecret (not $r.tls.enabled) (not (hasPrefix "rediss://" $r.url)) }}
{{- fail "redis.tls.existingSecret: needs redis.tls.enabled (or a rediss:// redis.url): the sidecar refuses TLS files with TLS off" }}
{{- end }}
{{- if ne (not $r.tls.certKey) (not $r.tls.keyKey) }}
{{- fail "redis.tls.certKey and redis.tls.keyKey: set both or neither" }}
{{- end }}
{{- $t := .Values.grpc.tls }}
{{- if and $t.enabled (not $t.secretName) }}
{{- fail "grpc.tls.secretName: required with grpc.tls.enabled (a kubernetes.io/tls Secret)" }}
{{- end }}
{{- if and $t.clientCA.enabled (not $t.enabled) }}
{{- fail "grpc.tls.clientCA.enabled: needs grpc.tls.enabled" }}
{{- end }}
{{- if and $t.clientSAN (not $t.clientCA.enabled) }}
{{- fail "grpc.tls.clientSAN: needs grpc.tls.clientCA.enabled" }}
{{- end }}
{{- if eq (int .Values.grpc.port) (int .Values.http.port) }}
{{- fail "grpc.port and http.port: must differ" }}
{{- end }}
{{- if has (int .Values.grpc.port) (list 8082) }}
{{- fail "grpc.port: 8082 is the admin listener's, on loopback" }}
{{- end }}
{{- if has (int .Values.http.port) (list 8082) }}
{{- fail "http.port: 8082 is the admin listener's, on loopback" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail "autoscaling.minReplicas: above autoscaling.maxReplicas" }}
{{- end }}
{{- end }}
