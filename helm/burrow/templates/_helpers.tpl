{{/* Names, labels and the pieces every Burrow workload shares. */}}

{{- define "burrow.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "burrow.fullname" -}}
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

{{/* "<fullname>-<component>", kept within 63 characters. Call with (list $ "mailbox"). */}}
{{- define "burrow.componentName" -}}
{{- $root := index . 0 }}
{{- printf "%s-%s" (include "burrow.fullname" $root | trunc (int (sub 62 (len (index . 1))))) (index . 1) | trimSuffix "-" }}
{{- end }}

{{- define "burrow.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "burrow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: burrow
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of one component. Call with (list $ "mailbox"). */}}
{{- define "burrow.componentLabels" -}}
{{ include "burrow.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* Selector labels of one component. Call with (list $ "mailbox"). */}}
{{- define "burrow.selectorLabels" -}}
app.kubernetes.io/name: {{ include "burrow.name" (index . 0) }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "burrow.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "burrow.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "burrow.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "burrow.reportImage" -}}
{{- printf "%s:%s" .Values.report.image.repository (default .Chart.AppVersion .Values.report.image.tag) }}
{{- end }}

{{/* The claim that holds the event logs, or "" when they live in an emptyDir. */}}
{{- define "burrow.logsClaim" -}}
{{- if and .Values.eventLogs.enabled .Values.eventLogs.persistence.enabled }}
{{- default (include "burrow.componentName" (list . "logs")) .Values.eventLogs.persistence.existingClaim }}
{{- end }}
{{- end }}

{{/* Volume for /var/log/burrow. */}}
{{- define "burrow.logsVolume" -}}
- name: logs
{{- if include "burrow.logsClaim" . }}
  persistentVolumeClaim:
    claimName: {{ include "burrow.logsClaim" . }}
{{- else }}
  emptyDir: {}
{{- end }}
{{- end }}

{{/* Environment shared by the servers: the pod name as node name and per-pod event-log file, so
     pods sharing the log claim never append to the same file. Call with (list $ "mailbox"). */}}
{{- define "burrow.commonEnv" -}}
{{- $root := index . 0 }}
{{- $prefix := printf "BURROW_%s_" (upper (index . 1)) -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: {{ $prefix }}NODE_NAME
  value: "$(POD_NAME)"
- name: {{ $prefix }}ADMIN_HOST
  value: "0.0.0.0"
{{- if $root.Values.eventLogs.enabled }}
- name: {{ $prefix }}EVENT_LOG
  value: "/var/log/burrow/{{ index . 1 }}-$(POD_NAME).jsonl"
{{- end }}
{{- end }}

{{/* User-supplied env map, sorted for stable output. */}}
{{- define "burrow.extraEnv" -}}
{{- range $name, $value := . }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end }}

{{/* Probes on the admin port. */}}
{{- define "burrow.probes" -}}
readinessProbe:
  httpGet:
    path: /readyz
    port: admin
  initialDelaySeconds: {{ .Values.probes.readiness.initialDelaySeconds }}
  periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
  timeoutSeconds: {{ .Values.probes.readiness.timeoutSeconds }}
  failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
livenessProbe:
  httpGet:
    path: /healthz
    port: admin
  initialDelaySeconds: {{ .Values.probes.liveness.initialDelaySeconds }}
  periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
  timeoutSeconds: {{ .Values.probes.liveness.timeoutSeconds }}
  failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
{{- end }}

{{/* Pod metadata shared by the server workloads. Call with (list $ "mailbox" adminPort). */}}
{{- define "burrow.podMetadata" -}}
{{- $root := index . 0 -}}
labels:
  {{- include "burrow.selectorLabels" (list $root (index . 1)) | nindent 2 }}
  {{- with $root.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- if or $root.Values.podAnnotations $root.Values.admin.prometheusAnnotations }}
annotations:
  {{- if $root.Values.admin.prometheusAnnotations }}
  prometheus.io/scrape: "true"
  prometheus.io/port: {{ index . 2 | quote }}
  prometheus.io/path: /metrics
  {{- end }}
  {{- with $root.Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end }}

{{/* Pod-spec fields shared by the server workloads. Call with (list $ .Values.mailbox). */}}
{{- define "burrow.podCommon" -}}
{{- $root := index . 0 }}
{{- $svc := index . 1 -}}
serviceAccountName: {{ include "burrow.serviceAccountName" $root }}
automountServiceAccountToken: false
enableServiceLinks: false
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
terminationGracePeriodSeconds: {{ $svc.terminationGracePeriodSeconds }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $svc.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $svc.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $svc.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Type of a public Service: its own type, else service.type. */}}
{{- define "burrow.serviceType" -}}
{{- default (index . 0).Values.service.type (index . 1).type }}
{{- end }}

{{/* Spec lines shared by public Services. Call with (list $ "LoadBalancer"). */}}
{{- define "burrow.serviceSpecCommon" -}}
{{- $root := index . 0 }}
{{- $type := index . 1 -}}
type: {{ $type }}
{{- if ne $type "ClusterIP" }}
externalTrafficPolicy: {{ $root.Values.service.externalTrafficPolicy }}
{{- end }}
{{- end }}

{{/* "true" when the mailbox keeps its state in Redis (redis.url, redis.urlSecret or the bundled
     Redis), else "" (SQLite, one replica). */}}
{{- define "burrow.mailboxOnRedis" -}}
{{- $r := .Values.redis }}
{{- $sources := 0 }}
{{- if $r.url }}{{ $sources = add1 $sources }}{{ end }}
{{- if $r.urlSecret.name }}{{ $sources = add1 $sources }}{{ end }}
{{- if $r.bundled.enabled }}{{ $sources = add1 $sources }}{{ end }}
{{- if gt $sources 1 }}
{{- fail "set only one of redis.url, redis.urlSecret.name and redis.bundled.enabled" }}
{{- end }}
{{- if gt $sources 0 }}true{{ end }}
{{- end }}

{{/* The mailbox's BURROW_MAILBOX_REDIS_URL entry. */}}
{{- define "burrow.mailboxRedisEnv" -}}
- name: BURROW_MAILBOX_REDIS_URL
{{- if .Values.redis.urlSecret.name }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.urlSecret.name }}
      key: {{ .Values.redis.urlSecret.key }}
{{- else if .Values.redis.url }}
  value: {{ .Values.redis.url | quote }}
{{- else }}
  value: "redis://{{ include "burrow.componentName" (list . "redis") }}:6379/0"
{{- end }}
{{- end }}

{{/* topologySpreadConstraints of one component's pods. Call with (list $ "mailbox"). */}}
{{- define "burrow.topologySpread" -}}
{{- $root := index . 0 }}
{{- $spread := $root.Values.topologySpread }}
{{- if $spread.enabled }}
topologySpreadConstraints:
{{- range $spread.topologyKeys }}
  - maxSkew: {{ $spread.maxSkew }}
    topologyKey: {{ . }}
    whenUnsatisfiable: {{ $spread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "burrow.selectorLabels" (list $root (index $ 1)) | nindent 8 }}
{{- end }}
{{- end }}
{{- end }}
