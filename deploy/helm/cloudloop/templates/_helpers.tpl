{{- define "cloudloop.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cloudloop.fullname" -}}
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

{{- define "cloudloop.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cloudloop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "cloudloop.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "cloudloop.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The configured provider's block of `providers` (fails on an unknown provider). */}}
{{- define "cloudloop.provider" -}}
{{- $name := required "provider is required (a key of .Values.providers)" .Values.provider }}
{{- if not (hasKey .Values.providers $name) }}
{{- fail (printf "provider %q has no block in .Values.providers (known: %s)" $name (keys .Values.providers | sortAlpha | join ", ")) }}
{{- end }}
{{- toYaml (index .Values.providers $name) }}
{{- end }}

{{/* ServiceAccount name of a component: (dict "root" $ "component" "worker"). */}}
{{- define "cloudloop.serviceAccountName" -}}
{{- $values := index .root.Values .component }}
{{- if $values.serviceAccount.create }}
{{- default (printf "%s-%s" (include "cloudloop.fullname" .root) .component) $values.serviceAccount.name }}
{{- else }}
{{- default "default" $values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "cloudloop.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* Name of the Secret with the cloud's credential files, empty if none. */}}
{{- define "cloudloop.credentialsSecret" -}}
{{- if .Values.cloud.credentials.create }}
{{- printf "%s-credentials" (include "cloudloop.fullname" .) }}
{{- else }}
{{- .Values.cloud.credentials.existingSecret }}
{{- end }}
{{- end }}

{{/* The --cloud-config file: the provider's settings plus the paths of its credential files. */}}
{{- define "cloudloop.cloudConfig" -}}
{{- $provider := include "cloudloop.provider" . | fromYaml }}
{{- $settings := deepCopy (.Values.cloud.settings | default dict) }}
{{- if include "cloudloop.credentialsSecret" . }}
{{- range $setting, $key := ($provider.credentialFiles | default dict) }}
{{- $_ := set $settings $setting (printf "%s/%s" $.Values.cloud.credentials.mountPath $key) }}
{{- end }}
{{- end }}
{{- if $settings }}{{ toYaml $settings }}{{ else }}{}{{ end }}
{{- end }}

{{/* Where the ConfigMap's files are mounted. */}}
{{- define "cloudloop.configDir" -}}/etc/cloudloop/config{{- end }}

{{/* The flags every long-running process takes: log format and the --cloud-config file. */}}
{{- define "cloudloop.processArgs" -}}
- --log-format={{ .Values.logFormat }}
- --cloud-config={{ include "cloudloop.configDir" . }}/cloud.yaml
{{- end }}

{{/* The configuration env of every process (worker, starter, CSI controller and node): the
     cluster, the cloud and the CLOUDLOOP_CONFIG file. Secrets never go here: they are files. */}}
{{- define "cloudloop.configEnv" -}}
- name: CLOUDLOOP_CLUSTER_NAME
  value: {{ required "clusterName is required" .Values.clusterName | quote }}
- name: CLOUDLOOP_PROVIDER
  value: {{ .Values.provider | quote }}
- name: CLOUDLOOP_CONFIG
  value: {{ include "cloudloop.configDir" . }}/config.yaml
{{- end }}

{{/* The ConfigMap (config.yaml, cloud.yaml) and the credentials Secret, read-only. */}}
{{- define "cloudloop.configMounts" -}}
- name: config
  mountPath: {{ include "cloudloop.configDir" . }}
  readOnly: true
{{- if include "cloudloop.credentialsSecret" . }}
- name: credentials
  mountPath: {{ .Values.cloud.credentials.mountPath }}
  readOnly: true
{{- end }}
{{- end }}

{{- define "cloudloop.configVolumes" -}}
- name: config
  configMap:
    name: {{ include "cloudloop.fullname" . }}
{{- with include "cloudloop.credentialsSecret" . }}
- name: credentials
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{/* Pod annotations that roll the pods when their configuration or credentials change. */}}
{{- define "cloudloop.configChecksums" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- if .Values.cloud.credentials.create }}
checksum/credentials: {{ include (print .Template.BasePath "/secret-credentials.yaml") . | sha256sum }}
{{- end }}
{{- end }}

{{/* A component's workload kind: Deployment (default) or DaemonSet on the control-plane nodes
     (the upstream vsphere CPI's layout): (dict "root" $ "component" "worker"). */}}
{{- define "cloudloop.kind" -}}
{{- (index .root.Values .component).kind | default "Deployment" }}
{{- end }}

{{/* A component's metrics port: on the host network the starter takes the next port, so a
     worker and a starter on one node never collide. */}}
{{/* With metrics.authorization the metrics port serves HTTPS (probes and scrapes too). */}}
{{- define "cloudloop.metricsScheme" -}}
{{- if .Values.metrics.authorization }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{- define "cloudloop.metricsPort" -}}
{{- if and .root.Values.hostNetwork (eq .component "starter") }}
{{- add1 (int .root.Values.metrics.port) }}
{{- else }}
{{- .root.Values.metrics.port }}
{{- end }}
{{- end }}

{{/* The task queue and workflow-ID scope the processes use: {taskQueue, workflowIdScope} (a key
     left out: the settings' default, a queue derived from clusterName). Values win; else what
     the release's ConfigMap recorded; else, for a release installed before queues derived
     from clusterName (its ConfigMap records neither), the old queue `cloudloop` and unscoped IDs,
     so its long-lived workflows keep their queue and IDs. `helm template` cannot look up: set
     both values when upgrading such a release that way. */}}
{{- define "cloudloop.queuePin" -}}
{{- $existing := lookup "v1" "ConfigMap" .Release.Namespace (include "cloudloop.fullname" .) }}
{{- $data := (($existing | default dict).data | default dict) }}
{{- $pin := dict }}
{{- if hasKey $data "temporal-task-queue" }}
{{- with get $data "temporal-task-queue" }}{{- $_ := set $pin "taskQueue" . }}{{- end }}
{{- if hasKey $data "temporal-workflow-id-scope" }}
{{- $_ := set $pin "workflowIdScope" (get $data "temporal-workflow-id-scope") }}
{{- end }}
{{- else if $existing }}
{{- $_ := set $pin "taskQueue" "cloudloop" }}
{{- $_ := set $pin "workflowIdScope" "" }}
{{- end }}
{{- with .Values.temporal.taskQueue }}{{- $_ := set $pin "taskQueue" . }}{{- end }}
{{- if ne (toString .Values.temporal.workflowIdScope) "<nil>" }}
{{- $_ := set $pin "workflowIdScope" (toString .Values.temporal.workflowIdScope) }}
{{- end }}
{{- toYaml $pin }}
{{- end }}

{{/* Temporal connection env (worker, starter and the set-up Job). */}}
{{- define "cloudloop.temporalEnv" -}}
- name: CLOUDLOOP_TEMPORAL__ADDRESS
  value: {{ .Values.temporal.address | quote }}
- name: CLOUDLOOP_TEMPORAL__NAMESPACE
  value: {{ .Values.temporal.namespace | quote }}
{{- $pin := include "cloudloop.queuePin" . | fromYaml }}
{{- with $pin.taskQueue }}
- name: CLOUDLOOP_TEMPORAL__TASK_QUEUE
  value: {{ . | quote }}
{{- end }}
{{- if hasKey $pin "workflowIdScope" }}
- name: CLOUDLOOP_TEMPORAL__WORKFLOW_ID_SCOPE
  value: {{ $pin.workflowIdScope | quote }}
{{- end }}
{{- if .Values.temporal.tls.enabled }}
- name: CLOUDLOOP_TEMPORAL__TLS__ENABLED
  value: "true"
{{- if .Values.temporal.tls.secretName }}
- name: CLOUDLOOP_TEMPORAL__TLS__CERT_FILE
  value: /etc/cloudloop/temporal-tls/tls.crt
- name: CLOUDLOOP_TEMPORAL__TLS__KEY_FILE
  value: /etc/cloudloop/temporal-tls/tls.key
- name: CLOUDLOOP_TEMPORAL__TLS__CA_FILE
  value: /etc/cloudloop/temporal-tls/ca.crt
{{- end }}
{{- end }}
{{- if .Values.temporal.apiKey.secretName }}
- name: CLOUDLOOP_TEMPORAL__API_KEY_FILE
  value: /etc/cloudloop/temporal-api-key/{{ .Values.temporal.apiKey.key }}
{{- end }}
{{- include "cloudloop.codecEnv" . }}
{{- end }}

{{/* The payload codec (issue 39): every process that talks to Temporal holds the key ring. */}}
{{- define "cloudloop.codecSecret" -}}
{{- .Values.temporal.codec.existingSecret | default (printf "%s-codec" (include "cloudloop.fullname" .)) }}
{{- end }}

{{- define "cloudloop.codecEnv" }}
- name: CLOUDLOOP_TEMPORAL__CODEC__ENABLED
  value: {{ .Values.temporal.codec.enabled | quote }}
{{- if and .Values.temporal.codec.enabled (not .withoutCodec) }}
- name: CLOUDLOOP_TEMPORAL__CODEC__KEY_DIR
  value: {{ .Values.temporal.codec.mountPath }}
{{- with .Values.temporal.codec.activeKeyId }}
- name: CLOUDLOOP_TEMPORAL__CODEC__ACTIVE_KEY_ID
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Not in the pre-install set-up Job (it sends no payload, and runs before the Secret exists):
     it renders the Temporal helpers with (dict ... "withoutCodec" true). */}}
{{- define "cloudloop.codecVolume" }}
{{- if and .Values.temporal.codec.enabled (not .withoutCodec) }}
- name: codec-keys
  secret:
    secretName: {{ include "cloudloop.codecSecret" . }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{- define "cloudloop.codecMount" }}
{{- if and .Values.temporal.codec.enabled (not .withoutCodec) }}
- name: codec-keys
  mountPath: {{ .Values.temporal.codec.mountPath }}
  readOnly: true
{{- end }}
{{- end }}

{{/* The worker's domain queues as CLOUDLOOP_TEMPORAL__QUEUES (JSON, the settings' field names);
an activitiesPerSecond of 0 is unlimited (null). */}}
{{- define "cloudloop.taskQueues" -}}
{{- $queues := dict }}
{{- range $domain, $queue := .Values.temporal.queues }}
{{- $settings := dict }}
{{- if hasKey $queue "maxConcurrentActivities" }}
{{- $_ := set $settings "max_concurrent_activities" (int $queue.maxConcurrentActivities) }}
{{- end }}
{{- if hasKey $queue "activitiesPerSecond" }}
{{- $_ := set $settings "activities_per_second" (ternary nil $queue.activitiesPerSecond (eq (toString $queue.activitiesPerSecond) "0")) }}
{{- end }}
{{- $_ := set $queues $domain $settings }}
{{- end }}
{{- toJson $queues }}
{{- end }}

{{- define "cloudloop.temporalVolumes" -}}
{{- if and .Values.temporal.tls.enabled .Values.temporal.tls.secretName }}
- name: temporal-tls
  secret:
    secretName: {{ .Values.temporal.tls.secretName }}
    defaultMode: 0440
{{- end }}
{{- with .Values.temporal.apiKey.secretName }}
- name: temporal-api-key
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
{{- include "cloudloop.codecVolume" . }}
{{- end }}

{{- define "cloudloop.temporalMounts" -}}
{{- if and .Values.temporal.tls.enabled .Values.temporal.tls.secretName }}
- name: temporal-tls
  mountPath: /etc/cloudloop/temporal-tls
  readOnly: true
{{- end }}
{{- if .Values.temporal.apiKey.secretName }}
- name: temporal-api-key
  mountPath: /etc/cloudloop/temporal-api-key
  readOnly: true
{{- end }}
{{- include "cloudloop.codecMount" . }}
{{- end }}

{{/* The pod spec of a component: (dict "root" $ "component" "worker"). */}}
{{- define "cloudloop.podSpec" -}}
{{- $root := .root }}
{{- $component := .component }}
{{- $values := index $root.Values $component }}
serviceAccountName: {{ include "cloudloop.serviceAccountName" . }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- if $root.Values.hostNetwork }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{ include "cloudloop.podSecurityContext" $root }}
{{- $daemonSet := eq (include "cloudloop.kind" .) "DaemonSet" }}
{{- $nodeSelector := deepCopy ($root.Values.nodeSelector | default dict) }}
{{- if or $root.Values.controlPlane $daemonSet }}
{{- $_ := set $nodeSelector "node-role.kubernetes.io/control-plane" "" }}
{{- end }}
{{- with $nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $root.Values.affinity }}
affinity:
  {{- toYaml $root.Values.affinity | nindent 2 }}
{{- else if not $daemonSet }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "cloudloop.selectorLabels" $root | nindent 14 }}
              app.kubernetes.io/component: {{ $component }}
{{- end }}
# The worker drains in-flight activities and the starter releases its Lease (up to 30 s).
terminationGracePeriodSeconds: 60
containers:
  - name: {{ $component }}
    image: {{ include "cloudloop.image" $root }}
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    args:
      - {{ $component }}
      {{- include "cloudloop.processArgs" $root | nindent 6 }}
      {{- if eq $component "starter" }}
      - --leader-elect=true
      {{- end }}
      {{- with $values.extraArgs }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- include "cloudloop.containerSecurityContext" $root | nindent 4 }}
    ports:
      - name: metrics
        containerPort: {{ include "cloudloop.metricsPort" . }}
        protocol: TCP
    livenessProbe:
      httpGet:
        path: /healthz
        port: metrics
        scheme: {{ include "cloudloop.metricsScheme" $root }}
      initialDelaySeconds: 10
      periodSeconds: 10
      timeoutSeconds: 5
      failureThreshold: 3
    readinessProbe:
      httpGet:
        path: /readyz
        port: metrics
        scheme: {{ include "cloudloop.metricsScheme" $root }}
      periodSeconds: 5
      timeoutSeconds: 5
      failureThreshold: 3
    env:
      - name: POD_NAME
        valueFrom:
          fieldRef:
            fieldPath: metadata.name
      - name: POD_NAMESPACE
        valueFrom:
          fieldRef:
            fieldPath: metadata.namespace
      {{- include "cloudloop.configEnv" $root | nindent 6 }}
      - name: CLOUDLOOP_METRICS_PORT
        value: {{ include "cloudloop.metricsPort" . | quote }}
      - name: CLOUDLOOP_METRICS_AUTHORIZATION
        value: {{ $root.Values.metrics.authorization | quote }}
      {{- if and $root.Values.metrics.authorization $root.Values.metrics.tls.secretName }}
      - name: CLOUDLOOP_METRICS_TLS_CERT_FILE
        value: /etc/cloudloop/metrics-tls/tls.crt
      - name: CLOUDLOOP_METRICS_TLS_KEY_FILE
        value: /etc/cloudloop/metrics-tls/tls.key
      {{- end }}
      {{- with $root.Values.metrics.tokenAudiences }}
      - name: CLOUDLOOP_METRICS_TOKEN_AUDIENCES
        value: {{ toJson . | quote }}
      {{- end }}
      {{- if eq $component "starter" }}
      - name: CLOUDLOOP_LEADER_ELECTION__NAMESPACE
        value: {{ $root.Values.starter.leaderElection.namespace | default $root.Release.Namespace | quote }}
      {{- if $root.Values.layouts.converge.enabled }}
      # the leader exports the converge passes' status ConfigMap as candi_converge_* metrics
      - name: CLOUDLOOP_LAYOUTS__CONVERGE__ENABLED
        value: "true"
      {{- end }}
      {{- end }}
      {{- with include "cloudloop.temporalEnv" $root | trim }}{{ . | nindent 6 }}{{- end }}
      {{- if eq $component "worker" }}
      - name: CLOUDLOOP_TEMPORAL__MAX_CONCURRENT_ACTIVITIES
        value: {{ $root.Values.temporal.maxConcurrentActivities | int | quote }}
      - name: CLOUDLOOP_TEMPORAL__QUEUES
        value: {{ include "cloudloop.taskQueues" $root | quote }}
      # the layout activities read configs (and destroy's kubeconfig) only under the mount
      - name: CLOUDLOOP_LAYOUTS__SOURCE_DIR
        value: {{ $root.Values.layouts.mountPath | quote }}
      {{- end }}
      {{- with $root.Values.extraEnv }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    volumeMounts:
      - name: tmp
        mountPath: /tmp
      {{- include "cloudloop.configMounts" $root | nindent 6 }}
      {{- with include "cloudloop.temporalMounts" $root | trim }}{{ . | nindent 6 }}{{- end }}
      {{- if and $root.Values.metrics.authorization $root.Values.metrics.tls.secretName }}
      - name: metrics-tls
        mountPath: /etc/cloudloop/metrics-tls
        readOnly: true
      {{- end }}
      {{- if and (eq $component "worker") $root.Values.layouts.existingSecret }}
      - name: layouts
        mountPath: {{ $root.Values.layouts.mountPath }}
        readOnly: true
      {{- end }}
    resources:
      {{- toYaml $values.resources | nindent 6 }}
volumes:
  - name: tmp
    emptyDir: {}
  {{- include "cloudloop.configVolumes" $root | nindent 2 }}
{{- with include "cloudloop.temporalVolumes" $root | trim }}{{ . | nindent 2 }}{{- end }}
{{- if and $root.Values.metrics.authorization $root.Values.metrics.tls.secretName }}
  - name: metrics-tls
    secret:
      secretName: {{ $root.Values.metrics.tls.secretName }}
{{- end }}
{{- if and (eq $component "worker") $root.Values.layouts.existingSecret }}
  - name: layouts
    secret:
      secretName: {{ $root.Values.layouts.existingSecret }}
      defaultMode: 0440
{{- end }}
{{- end }}

{{/* -- the chart's boundary (issue 39; deploy/SECURITY.md) ----------------------------------
     The restricted Pod Security level of every pod but the node agents: one include per pod
     spec and one per container (the values podSecurityContext and securityContext). */}}
{{- define "cloudloop.podSecurityContext" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

{{- define "cloudloop.containerSecurityContext" -}}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
{{- end }}
