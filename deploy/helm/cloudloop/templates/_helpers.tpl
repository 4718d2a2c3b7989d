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

{{- define "cloudloop.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cloudloop.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "cloudloop.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Name of the Secret with cloud credential files, empty if none. */}}
{{- define "cloudloop.credentialsSecret" -}}
{{- if .Values.cloud.credentials.create }}
{{- printf "%s-credentials" (include "cloudloop.fullname" .) }}
{{- else }}
{{- .Values.cloud.credentials.existingSecret }}
{{- end }}
{{- end }}

{{/* Pod-level settings shared by the worker and starter Deployments. */}}
{{- define "cloudloop.podSpecCommon" -}}
serviceAccountName: {{ include "cloudloop.serviceAccountName" . }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  - name: tmp
    emptyDir: {}
  - name: config
    configMap:
      name: {{ include "cloudloop.fullname" . }}
{{- with include "cloudloop.credentialsSecret" . }}
  - name: credentials
    secret:
      secretName: {{ . }}
      defaultMode: 0440
{{- end }}
{{- with .Values.temporal.tls.secretName }}
  - name: temporal-tls
    secret:
      secretName: {{ . }}
      defaultMode: 0440
{{- end }}
{{- end }}

{{/* Pod annotations that roll the pods when config or credentials change. */}}
{{- define "cloudloop.podAnnotations" -}}
checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- if .Values.cloud.credentials.create }}
checksum/credentials: {{ include (print $.Template.BasePath "/secret-credentials.yaml") . | sha256sum }}
{{- end }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Container settings shared by the worker and starter (everything but name/args/resources). */}}
{{- define "cloudloop.containerCommon" -}}
image: {{ include "cloudloop.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
ports:
  - name: metrics
    containerPort: {{ .Values.metrics.port }}
    protocol: TCP
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  initialDelaySeconds: 10
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
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
  - name: CLOUDLOOP_LEADER_ELECTION__NAMESPACE
    value: {{ .Values.starter.leaderElection.namespace | default .Release.Namespace | quote }}
  - name: CLOUDLOOP_TEMPORAL__ADDRESS
    value: {{ .Values.temporal.address | quote }}
  - name: CLOUDLOOP_TEMPORAL__NAMESPACE
    value: {{ .Values.temporal.namespace | quote }}
  - name: CLOUDLOOP_TEMPORAL__TASK_QUEUE
    value: {{ .Values.temporal.taskQueue | quote }}
  {{- if .Values.temporal.tls.secretName }}
  - name: CLOUDLOOP_TEMPORAL__TLS__CERT_FILE
    value: /etc/cloudloop/temporal-tls/tls.crt
  - name: CLOUDLOOP_TEMPORAL__TLS__KEY_FILE
    value: /etc/cloudloop/temporal-tls/tls.key
  - name: CLOUDLOOP_TEMPORAL__TLS__CA_FILE
    value: /etc/cloudloop/temporal-tls/ca.crt
  {{- end }}
  - name: CLOUDLOOP_CLUSTER_NAME
    value: {{ required "clusterName is required" .Values.clusterName | quote }}
  - name: CLOUDLOOP_PROVIDER
    value: {{ .Values.provider | quote }}
  - name: CLOUDLOOP_METRICS_PORT
    value: {{ .Values.metrics.port | quote }}
  - name: CLOUDLOOP_CONFIG
    value: /etc/cloudloop/config/config.yaml
  {{- if eq .Values.provider "aws" }}
  {{- with .Values.cloud.aws.region }}
  - name: CLOUDLOOP_AWS__REGION
    value: {{ . | quote }}
  {{- end }}
  {{- with .Values.cloud.aws.endpointUrl }}
  - name: CLOUDLOOP_AWS__ENDPOINT_URL
    value: {{ . | quote }}
  {{- end }}
  {{- if include "cloudloop.credentialsSecret" . }}
  - name: CLOUDLOOP_AWS__CREDENTIALS_FILE
    value: {{ printf "%s/%s" .Values.cloud.credentials.mountPath .Values.cloud.aws.credentialsFile | quote }}
  {{- end }}
  {{- end }}
  {{- with .Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
volumeMounts:
  - name: tmp
    mountPath: /tmp
  - name: config
    mountPath: /etc/cloudloop/config
    readOnly: true
  {{- if include "cloudloop.credentialsSecret" . }}
  - name: credentials
    mountPath: {{ .Values.cloud.credentials.mountPath }}
    readOnly: true
  {{- end }}
  {{- if .Values.temporal.tls.secretName }}
  - name: temporal-tls
    mountPath: /etc/cloudloop/temporal-tls
    readOnly: true
  {{- end }}
{{- end }}
