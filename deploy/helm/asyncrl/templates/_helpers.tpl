{{/* The release's base name: <release>-asyncrl, or the release name when it holds "asyncrl". */}}
{{- define "asyncrl.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "asyncrl.headless" -}}{{ include "asyncrl.fullname" . }}-headless{{- end -}}

{{- define "asyncrl.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "asyncrl.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "asyncrl.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The NATS URL of mode external: bus.url, else the nats subchart's service. */}}
{{- define "asyncrl.busURL" -}}
{{- if .Values.bus.url -}}
{{ .Values.bus.url }}
{{- else if .Values.nats.enabled -}}
nats://{{ .Release.Name }}-nats.{{ .Release.Namespace }}.svc:4222
{{- else -}}
{{ fail "bus.mode external needs bus.url (your NATS) or nats.enabled (the official NATS chart as a dependency)" }}
{{- end -}}
{{- end -}}

{{/* The DNS name of node pod i: <fullname>-<i>.<headless>.<namespace>.svc */}}
{{- define "asyncrl.podHost" -}}
{{ include "asyncrl.fullname" .root }}-{{ .i }}.{{ include "asyncrl.headless" .root }}.{{ .root.Release.Namespace }}.svc
{{- end -}}

{{- define "asyncrl.secretDir" -}}/etc/asyncrl/secrets{{- end -}}
{{- define "asyncrl.tlsDir" -}}/etc/asyncrl/tls{{- end -}}

{{/* The bus client flags of `asyncrl node` (mode external). */}}
{{- define "asyncrl.busClientArgs" -}}
{{- $s := include "asyncrl.secretDir" . -}}
{{- $t := include "asyncrl.tlsDir" . -}}
- --nats={{ include "asyncrl.busURL" . }}
{{- if eq .Values.bus.auth "userPassword" }}
- --nats-user={{ .Values.bus.user }}
- --nats-password-file={{ $s }}/nats-password
{{- else if eq .Values.bus.auth "token" }}
- --nats-token-file={{ $s }}/nats-token
{{- else if eq .Values.bus.auth "creds" }}
- --nats-creds={{ $s }}/nats.creds
{{- else if eq .Values.bus.auth "nkey" }}
- --nats-nkey={{ $s }}/nats.nkey
{{- end }}
{{- if .Values.bus.tls.enabled }}
- --nats-tls-ca={{ $t }}/ca.crt
{{- if .Values.bus.tls.clientCert }}
- --nats-tls-cert={{ $t }}/tls.crt
- --nats-tls-key={{ $t }}/tls.key
{{- end }}
{{- end }}
{{- end -}}

{{/* The same as bus.* keys of the run config, for `asyncrl run` (engines: vllm). */}}
{{- define "asyncrl.busConfig" -}}
{{- $s := include "asyncrl.secretDir" . -}}
{{- $t := include "asyncrl.tlsDir" . -}}
{{- $b := dict "nats_url" (include "asyncrl.busURL" .) -}}
{{- if eq .Values.bus.auth "userPassword" }}{{ $_ := set $b "user" .Values.bus.user }}{{ $_ := set $b "password_file" (printf "%s/nats-password" $s) }}{{ end -}}
{{- if eq .Values.bus.auth "token" }}{{ $_ := set $b "token_file" (printf "%s/nats-token" $s) }}{{ end -}}
{{- if eq .Values.bus.auth "creds" }}{{ $_ := set $b "creds_file" (printf "%s/nats.creds" $s) }}{{ end -}}
{{- if eq .Values.bus.auth "nkey" }}{{ $_ := set $b "nkey_seed_file" (printf "%s/nats.nkey" $s) }}{{ end -}}
{{- if .Values.bus.tls.enabled }}{{ $_ := set $b "tls_ca" (printf "%s/ca.crt" $t) }}
{{- if .Values.bus.tls.clientCert }}{{ $_ := set $b "tls_cert" (printf "%s/tls.crt" $t) }}{{ $_ := set $b "tls_key" (printf "%s/tls.key" $t) }}{{ end -}}
{{- end -}}
{{ toJson $b }}
{{- end -}}

{{- define "asyncrl.needsTLS" -}}
{{- if or .Values.bus.tls.enabled (eq .Values.bus.mode "embedded") -}}true{{- end -}}
{{- end -}}
