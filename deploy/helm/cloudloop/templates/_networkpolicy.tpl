{{/* -- NetworkPolicies (issue 39; networkpolicy.yaml, deploy/SECURITY.md) -------------------- */}}

{{/* Components the policies leave out: the hook Jobs (they run before the release's objects
     exist, or after, serve nothing and reach only Temporal) and the host-network IMDS agent
     (out of NetworkPolicy's reach). Every other pod of the release is isolated. */}}
{{- define "cloudloop.netpol.unselected" -}}
{{- toJson (list "temporal-setup" "nth-uninstall" "layout-converge-install" "nth-imds") }}
{{- end }}

{{/* The pods of the release a policy selects: (dict "root" $ "components" (list ...)), or
     every pod but the unselected ones without "components". */}}
{{- define "cloudloop.netpol.podSelector" -}}
podSelector:
  matchLabels:
    {{- include "cloudloop.selectorLabels" .root | nindent 4 }}
  matchExpressions:
    - key: app.kubernetes.io/component
      {{- if .components }}
      operator: In
      values: {{ toJson .components }}
      {{- else }}
      operator: NotIn
      values: {{ include "cloudloop.netpol.unselected" .root }}
      {{- end }}
{{- end }}

{{/* The host and port of temporal.address (host:port; the port 7233 when none is given). */}}
{{- define "cloudloop.netpol.temporalHost" -}}
{{- $address := .Values.temporal.address | trimPrefix "dns:///" }}
{{- if hasPrefix "[" $address }}
{{- regexReplaceAll "^\\[([^\\]]*)\\].*$" $address "${1}" }}
{{- else }}
{{- regexReplaceAll ":[0-9]+$" $address "" }}
{{- end }}
{{- end }}

{{- define "cloudloop.netpol.temporalPort" -}}
{{- $port := regexFind ":[0-9]+$" .Values.temporal.address | trimPrefix ":" }}
{{- $port | default "7233" }}
{{- end }}

{{/* The Temporal frontend's peers (networkPolicy.temporal.to, else from temporal.address). */}}
{{- define "cloudloop.netpol.temporalPeers" -}}
{{- $values := .Values.networkPolicy.temporal }}
{{- if $values.to }}
{{- toYaml $values.to }}
{{- else }}
{{- $host := include "cloudloop.netpol.temporalHost" . }}
{{- if regexMatch "^[0-9]+(\\.[0-9]+){3}$" $host }}
- ipBlock: {cidr: {{ $host }}/32}
{{- else if contains ":" $host }}
- ipBlock: {cidr: {{ $host }}/128}
{{- else }}
{{- $labels := splitList "." $host }}
{{- if eq (len $labels) 1 }}
- podSelector: {}
{{- else if or (eq (len $labels) 2) (eq (index $labels 2) "svc") }}
- namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {{ index $labels 1 }}
{{- else }}
- ipBlock: {cidr: 0.0.0.0/0}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The API server's peers and ports: networkPolicy.apiServer.cidrs, else the addresses of the
     default/kubernetes EndpointSlice (helm lookup at install), else none (any address). */}}
{{- define "cloudloop.netpol.apiServer" -}}
{{- $values := .Values.networkPolicy.apiServer }}
{{- $cidrs := $values.cidrs | default list }}
{{- $ports := list }}
{{- range $values.ports }}{{ $ports = append $ports (int .) }}{{ end }}
{{- if not $cidrs }}
{{- $slice := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "kubernetes" }}
{{- range ($slice.endpoints | default list) }}
{{- range .addresses }}
{{- $cidrs = append $cidrs (printf "%s/%s" . (ternary "128" "32" (contains ":" .))) }}
{{- end }}
{{- end }}
{{- range ($slice.ports | default list) }}
{{- $ports = append $ports (int .port) }}
{{- end }}
{{- end }}
{{- toJson (dict "cidrs" ($cidrs | uniq) "ports" ($ports | uniq)) }}
{{- end }}
