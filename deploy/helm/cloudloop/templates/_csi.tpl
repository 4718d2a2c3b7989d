{{/* CSI driver: the env both CSI processes read. Like the worker and starter they get the
     cloud's settings (--cloud-config) and the CLOUDLOOP_CONFIG file: the driver builds
     StorageClasses, topology and limits from them. The controller also gets the credentials
     Secret's files; the node plugin none (docs/decisions/node-agents-credentials.md). */}}
{{- define "cloudloop.csi.env" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
{{ include "cloudloop.configEnv" . }}
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
{{ include "cloudloop.containerSecurityContext" .root }}
{{- end }}

{{/* -- snapshots (issue 29) -------------------------------------------------------------------
     "true" when csi-snapshotter runs: CSI on, snapshots on, and the provider's driver has them. */}}
{{- define "cloudloop.csi.snapshots" -}}
{{- $provider := include "cloudloop.provider" . | fromYaml }}
{{- if and .Values.csi.enabled .Values.csi.snapshots.enabled $provider.csiSnapshots }}true{{ end }}
{{- end }}

{{/* "true" when the CSI controller keeps the driver's VolumeSnapshotClass (from discovery). */}}
{{- define "cloudloop.csi.snapshotClass" -}}
{{- if and (include "cloudloop.csi.snapshots" .) .Values.csi.snapshots.volumeSnapshotClass.create }}true{{ end }}
{{- end }}

{{- define "cloudloop.csi.snapshotClassName" -}}
{{- .Values.csi.snapshots.volumeSnapshotClass.name | default (include "cloudloop.fullname" .) }}
{{- end }}
{{/* -- end snapshots ------------------------------------------------------------------------ */}}
