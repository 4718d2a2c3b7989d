{{/* CSI driver: the env both CSI processes read (Temporal for the controller, the cloud's name for
     both; the controller never needs cloud credentials: the workers hold them). */}}
{{- define "cloudloop.csi.env" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
- name: CLOUDLOOP_PROVIDER
  value: {{ .Values.provider | quote }}
- name: CLOUDLOOP_CLUSTER_NAME
  value: {{ required "clusterName is required" .Values.clusterName | quote }}
- name: CLOUDLOOP_TEMPORAL__ADDRESS
  value: {{ .Values.temporal.address | quote }}
- name: CLOUDLOOP_TEMPORAL__NAMESPACE
  value: {{ .Values.temporal.namespace | quote }}
- name: CLOUDLOOP_TEMPORAL__TASK_QUEUE
  value: {{ .Values.temporal.taskQueue | quote }}
- name: CLOUDLOOP_CSI__DRIVER_NAME
  value: {{ .Values.csi.driverName | quote }}
- name: CLOUDLOOP_CSI__ENDPOINT
  value: unix:///csi/csi.sock
{{- end }}

{{- define "cloudloop.csi.sidecar" -}}
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
args:
  - --csi-address=/csi/csi.sock
  - --leader-election=true
  - --leader-election-namespace={{ .root.Release.Namespace }}
  - --timeout={{ .root.Values.csi.timeout }}
  {{- range .extra }}
  - {{ . }}
  {{- end }}
volumeMounts:
  - name: socket-dir
    mountPath: /csi
{{- end }}
