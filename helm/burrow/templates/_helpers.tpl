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
  {{- if include "burrow.servesClients" (list $root (index . 1)) }}
  {{- include "burrow.publicLabel" $root | nindent 2 }}
  {{- end }}
  {{- if include "burrow.colocated" (list $root (index . 1)) }}
  burrow-colocated: "true"
  {{- end }}
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

{{/* Pod-spec fields shared by the server workloads. Call with (list $ .Values.mailbox "mailbox"). */}}
{{- define "burrow.podCommon" -}}
{{- $root := index . 0 }}
{{- $svc := index . 1 }}
{{- $affinity := deepCopy ($svc.affinity | default dict) }}
{{- if include "burrow.colocated" (list $root (index . 2)) }}
{{- /* on a node that runs the group's other pods; the first pod of the group, matching its own term, may go anywhere */}}
{{- $podAffinity := deepCopy ($affinity.podAffinity | default dict) }}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "burrow.colocatedLabels" $root | fromYaml)) }}
{{- $_ := set $podAffinity "requiredDuringSchedulingIgnoredDuringExecution" (append ($podAffinity.requiredDuringSchedulingIgnoredDuringExecution | default list) $term) }}
{{- $_ = set $affinity "podAffinity" $podAffinity }}
{{- end -}}
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
{{- with $affinity }}
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
{{- if and (eq $type "LoadBalancer") $root.Values.service.loadBalancerIP }}
loadBalancerIP: {{ $root.Values.service.loadBalancerIP | quote }}
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
{{- include "burrow.redisEnv" (list . "BURROW_MAILBOX_REDIS_URL") }}
{{- end }}

{{/* An env entry NAME with the chart's Redis URL (redis.url, redis.urlSecret or the bundled Redis).
     Call with (list $ NAME). */}}
{{- define "burrow.redisEnv" -}}
{{- $name := index . 1 }}
{{- with index . 0 }}
- name: {{ $name }}
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


{{/* How clients reach the services (expose.mode): "shared", "ingress" or "separate". */}}
{{- define "burrow.exposeMode" -}}
{{- $mode := .Values.expose.mode }}
{{- if not (has $mode (list "shared" "ingress" "separate")) }}
{{- fail (printf "expose.mode must be shared, ingress or separate, not %q" $mode) }}
{{- end }}
{{- $mode }}
{{- end }}

{{/* "true" when the relay serves iroh's QUIC address discovery (relay.qad): it needs the relay's own
     certificate and the relay URL's address, neither of which the relay has behind an Ingress. */}}
{{- define "burrow.relayQad" -}}
{{- if and .Values.relay.enabled .Values.relay.qad.enabled (ne (include "burrow.exposeMode" .) "ingress") }}true{{ end }}
{{- end }}

{{/* The QAD port of a Service with expose.mode separate. Call with (list $ $serviceType). */}}
{{- define "burrow.relayQadServicePort" -}}
{{- $root := index . 0 }}
- name: relay-qad
  port: {{ $root.Values.relay.qad.port }}
  targetPort: relay-qad
  protocol: UDP
  {{- include "burrow.nodePort" (list (index . 1) $root.Values.relay.qad.nodePort) | nindent 2 }}
{{- end }}

{{/* The pod label the shared Services select on: set on the pods that take clients' connections
     (not on transit replicas behind the HAProxy front end, nor on Redis). */}}
{{- define "burrow.publicLabel" -}}
burrow-public: "true"
{{- end }}

{{/* "true" when a component's pods take clients' connections themselves. Call with (list $ "transit"). */}}
{{- define "burrow.servesClients" -}}
{{- $root := index . 0 }}
{{- $component := index . 1 }}
{{- if has $component (list "mailbox" "relay" "transit-haproxy") }}true
{{- else if and (eq $component "transit") (ne $root.Values.transit.scaling "haproxy") }}true
{{- end }}
{{- end }}

{{/* Selector of the shared Services: every pod of the release that takes clients' connections; each
     Service port's named targetPort picks the pods that define that port name. */}}
{{- define "burrow.publicSelector" -}}
app.kubernetes.io/name: {{ include "burrow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "burrow.publicLabel" . }}
{{- end }}

{{/* nodePort line of a Service port when the type allows one and a value is set.
     Call with (list $type $nodePort). */}}
{{- define "burrow.nodePort" -}}
{{- if and (ne (index . 0) "ClusterIP") (not (kindIs "invalid" (index . 1))) }}
nodePort: {{ index . 1 }}
{{- end }}
{{- end }}

{{/* Components behind one LoadBalancer/NodePort Service (expose.mode shared or ingress), as a list
     of lists: with externalTrafficPolicy Local the load balancer checks each node's health per Service,
     not per port (kube-proxy's healthCheckNodePort counts a node's ready endpoints of any port), so a
     node running only one of them would be sent, and drop, the others' connections. */}}
{{- define "burrow.colocatedGroups" -}}
{{- $mode := include "burrow.exposeMode" . }}
{{- $v := .Values }}
{{- $groups := list }}
{{- if and (ne $mode "separate") (ne $v.service.type "ClusterIP") (eq $v.service.externalTrafficPolicy "Local") }}
{{- $main := list }}
{{- if and $v.mailbox.enabled (eq $mode "shared") }}{{ $main = append $main "mailbox" }}{{ end }}
{{- if $v.transit.enabled }}{{ $main = append $main (ternary "transit-haproxy" "transit" (eq $v.transit.scaling "haproxy")) }}{{ end }}
{{- /* shared: relay HTTPS is there in any case; ingress: only STUN, unless it has its own Service */}}
{{- if and $v.relay.enabled (or (eq $mode "shared") $v.expose.mixedProtocol) }}{{ $main = append $main "relay" }}{{ end }}
{{- if gt (len $main) 1 }}{{ $groups = append $groups $main }}{{ end }}
{{- end }}
{{- toJson $groups }}
{{- end }}

{{/* Pods per component, as the workloads run them. Call with (list $ "transit-haproxy"). */}}
{{- define "burrow.podCount" -}}
{{- $v := (index . 0).Values }}
{{- $c := index . 1 }}
{{- if eq $c "transit-haproxy" }}{{ $v.transit.haproxy.replicas }}
{{- else }}{{ (index $v $c).replicas }}{{ end }}
{{- end }}

{{/* "true" when a component's pods must share their node with the other components behind the same
     Service (burrow.colocatedGroups). Several pods per component cannot all be kept together, so the
     chart refuses that combination. Call with (list $ "relay"). */}}
{{- define "burrow.colocated" -}}
{{- $root := index . 0 }}
{{- $component := index . 1 }}
{{- range (include "burrow.colocatedGroups" $root | fromJsonArray) }}
{{- $group := . }}
{{- range $group }}
{{- if gt (int (include "burrow.podCount" (list $root .))) 1 }}
{{- fail (printf "expose.mode %s puts %s behind one Service, and with service.externalTrafficPolicy Local a load balancer checks node health per Service, not per port: a node running only one of them would receive and drop the others' connections. With several %s pods use expose.mode separate (one Service per component; they may share one address: service.loadBalancerIP), expose.mode ingress with expose.mixedProtocol false, or service.externalTrafficPolicy Cluster (clients' addresses are then lost; STUN answers with a node's address). docs/deploy.md, \"Exposing the services\"." $root.Values.expose.mode (join ", " $group) .) }}
{{- end }}
{{- end }}
{{- if has $component $group }}true{{ end }}
{{- end }}
{{- end }}

{{/* Labels of the pods that must share one node (burrow.colocated). */}}
{{- define "burrow.colocatedLabels" -}}
app.kubernetes.io/name: {{ include "burrow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
burrow-colocated: "true"
{{- end }}
