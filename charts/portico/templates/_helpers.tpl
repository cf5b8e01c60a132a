{{/* Names and labels. */}}
{{- define "portico.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "portico.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "portico.selectorLabels" -}}
app.kubernetes.io/name: {{ include "portico.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "portico.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "portico.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "portico.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "portico.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "portico.secretName" -}}
{{- printf "%s-secrets" (include "portico.fullname" .) -}}
{{- end -}}

{{/* "true" when the pods form a cluster (docs/cluster.md): standalone with several
replicas (cluster.enabled: auto) or forced on; sidecars that name their workload's headless
Service. */}}
{{- define "portico.clusterOn" -}}
{{- $enabled := .Values.cluster.enabled -}}
{{- if eq .Values.mode "standalone" -}}
{{- if or (eq (toString $enabled) "true") (and (eq (toString $enabled) "auto") (or (gt (int .Values.replicaCount) 1) .Values.autoscaling.enabled)) -}}true{{- end -}}
{{- else if and .Values.cluster.sidecarPeers (ne (toString $enabled) "false") -}}true
{{- end -}}
{{- end -}}

{{/* The headless Service whose addresses are the members. */}}
{{- define "portico.peersName" -}}
{{- printf "%s-peers" (include "portico.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* cluster.tls_server_name: cluster.tls.serverName, else the headless Service's name. */}}
{{- define "portico.peerServerName" -}}
{{- if .Values.cluster.tls.serverName -}}
{{- .Values.cluster.tls.serverName -}}
{{- else if eq .Values.mode "standalone" -}}
{{- printf "%s.%s.svc" (include "portico.peersName" .) .Release.Namespace -}}
{{- else -}}
{{- printf "%s.%s.svc" .Values.cluster.sidecarPeers .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* cluster.members_dns: the chart's headless Service, or the sidecars' workload's. */}}
{{- define "portico.membersDns" -}}
{{- if eq .Values.mode "standalone" -}}
{{- printf "%s.%s.svc.cluster.local:%d" (include "portico.peersName" .) .Release.Namespace (int .Values.cluster.port) -}}
{{- else -}}
{{- printf "%s:%d" .Values.cluster.sidecarPeers (int .Values.cluster.port) -}}
{{- end -}}
{{- end -}}

{{/* A TOML value: strings quoted, whole numbers without a decimal point (Helm reads
every YAML number as a float), lists of values. */}}
{{- define "portico.tomlValue" -}}
{{- if kindIs "string" . -}}
{{- . | quote -}}
{{- else if kindIs "bool" . -}}
{{- . -}}
{{- else if or (kindIs "float64" .) (kindIs "float32" .) -}}
{{- if eq (floor .) (float64 .) -}}{{- int64 . -}}{{- else -}}{{- . -}}{{- end -}}
{{- else if or (kindIs "int" .) (kindIs "int64" .) -}}
{{- . -}}
{{- else if kindIs "slice" . -}}
[{{- range $index, $item := . -}}{{- if $index -}}, {{ end -}}{{- include "portico.tomlValue" $item -}}{{- end -}}]
{{- else -}}
{{- fail (printf "config values must be strings, numbers, booleans or lists, not %s" (kindOf .)) -}}
{{- end -}}
{{- end -}}

{{/* portico.toml from .Values.config: one [section] per map, one key = value per entry,
then one [[upstreams]] and one [[rules]] table per entry of config.upstreams and
config.rules (order kept: the first match wins);
the credentials file is mounted by the chart when configured. */}}
{{- define "portico.toml" -}}
# Rendered by the portico Helm chart from .Values.config; see docs/configuration.md.
{{- $config := deepCopy .Values.config -}}
{{- if .Values.clientCredentials.credentialsFileSecret -}}
{{- $auth := default dict (get $config "auth") -}}
{{- $_ := set $auth "credentials_file" "/etc/portico/credentials/credentials.toml" -}}
{{- $_ := set $config "auth" $auth -}}
{{- end -}}
{{- if include "portico.clusterOn" . -}}
{{- $cluster := default dict (get $config "cluster") -}}
{{- $_ := set $cluster "enabled" true -}}
{{- $_ := set $cluster "listen" (printf "0.0.0.0:%d" (int .Values.cluster.port)) -}}
{{- if not (or $cluster.members $cluster.members_dns $cluster.members_file) -}}
{{- $_ := set $cluster "members_dns" (include "portico.membersDns" .) -}}
{{- end -}}
{{- if .Values.cluster.tls.secretName -}}
{{- $_ := set $cluster "tls_cert" "/etc/portico/cluster-tls/tls.crt" -}}
{{- $_ := set $cluster "tls_key" "/etc/portico/cluster-tls/tls.key" -}}
{{- $_ := set $cluster "tls_ca" "/etc/portico/cluster-tls/ca.crt" -}}
{{- $_ := set $cluster "tls_server_name" (include "portico.peerServerName" .) -}}
{{- end -}}
{{- $_ := set $config "cluster" $cluster -}}
{{- end -}}
{{- $rules := default list (get $config "rules") -}}
{{- $_ := unset $config "rules" -}}
{{- $upstreams := default list (get $config "upstreams") -}}
{{- $_ := unset $config "upstreams" -}}
{{- range $section, $keys := $config }}

[{{ $section }}]
{{- range $key, $value := $keys }}
{{ $key }} = {{ include "portico.tomlValue" $value }}
{{- end }}
{{- end }}
{{- range $upstreams }}

[[upstreams]]
{{- range $key, $value := . }}
{{ $key }} = {{ include "portico.tomlValue" $value }}
{{- end }}
{{- end }}
{{- range $rules }}

[[rules]]
{{- range $key, $value := . }}
{{ $key }} = {{ include "portico.tomlValue" $value }}
{{- end }}
{{- end }}
{{- end -}}

{{/* A size from the config in MiB (e.g. 1GiB, 512MiB); (list value default key). */}}
{{- define "portico.mebibytes" -}}
{{- $size := toString (default (index . 1) (index . 0)) -}}
{{- $number := regexFind "^[0-9]+" $size | atoi -}}
{{- $unit := regexFind "[A-Za-z]+$" $size -}}
{{- if eq $unit "MiB" -}}{{ $number }}
{{- else if eq $unit "GiB" -}}{{ mul $number 1024 }}
{{- else if eq $unit "TiB" -}}{{ mul $number 1048576 }}
{{- else if and (eq $unit "B") (eq $number 0) -}}0
{{- else -}}{{ fail (printf "config.%s %q: use a whole number of MiB, GiB or TiB" (index . 2) $size) }}
{{- end -}}
{{- end -}}

{{/* The pod's memory: the memory tier, the disk tier's index (about 256 KiB per GiB: one
entry per 256 KiB piece) and, in the limit, the in-flight budget. */}}
{{- define "portico.resources" -}}
{{- if .Values.resources -}}
{{- toYaml .Values.resources -}}
{{- else -}}
{{- $memory := include "portico.mebibytes" (list .Values.config.cache.memory_capacity "1GiB" "cache.memory_capacity") | atoi -}}
{{- $inflight := include "portico.mebibytes" (list (.Values.config.server | default dict).max_inflight_bytes "512MiB" "server.max_inflight_bytes") | atoi -}}
{{- $disk := include "portico.mebibytes" (list .Values.config.cache.disk_capacity "10GiB" "cache.disk_capacity") | atoi -}}
{{- $index := div $disk 4096 -}}
requests:
  cpu: 250m
  memory: {{ add $memory $index 256 }}Mi
limits:
  memory: {{ add $memory $index $inflight 256 }}Mi
{{- end -}}
{{- end -}}

{{- define "portico.secretEnv" -}}
{{- $name := index . 0 -}}
{{- $secret := index . 1 -}}
{{- $key := index . 2 -}}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $key }}
{{- end -}}

{{/* Environment: secrets from Secrets (never in the ConfigMap), OTLP settings. */}}
{{- define "portico.env" -}}
{{- $secret := include "portico.secretName" . -}}
{{- with .Values.upstreamCredentials }}
{{- if or .existingSecret .accessKeyId }}
{{- $name := default $secret .existingSecret }}
{{ include "portico.secretEnv" (list "PORTICO_UPSTREAM_ACCESS_KEY_ID" $name (ternary "access_key_id" "upstream_access_key_id" (ne .existingSecret ""))) }}
{{ include "portico.secretEnv" (list "PORTICO_UPSTREAM_SECRET_ACCESS_KEY" $name (ternary "secret_access_key" "upstream_secret_access_key" (ne .existingSecret ""))) }}
{{- end }}
{{- end }}
{{- with .Values.clientCredentials }}
{{- if or .existingSecret .accessKeyId }}
{{- $name := default $secret .existingSecret }}
{{ include "portico.secretEnv" (list "PORTICO_AUTH_ACCESS_KEY_ID" $name (ternary "access_key_id" "client_access_key_id" (ne .existingSecret ""))) }}
{{ include "portico.secretEnv" (list "PORTICO_AUTH_SECRET_ACCESS_KEY" $name (ternary "secret_access_key" "client_secret_access_key" (ne .existingSecret ""))) }}
{{- end }}
{{- end }}
{{- with .Values.adminToken }}
{{- if or .existingSecret .value }}
{{ include "portico.secretEnv" (list "PORTICO_ADMIN_TOKEN" (default $secret .existingSecret) (ternary "token" "admin_token" (ne .existingSecret ""))) }}
{{- end }}
{{- end }}
{{- range .Values.upstreamsCredentials }}
{{- $prefix := printf "PORTICO_UPSTREAMS_%s_" (.name | upper | replace "-" "_" | replace "." "_") }}
{{ include "portico.secretEnv" (list (printf "%sACCESS_KEY_ID" $prefix) .existingSecret "access_key_id") }}
{{ include "portico.secretEnv" (list (printf "%sSECRET_ACCESS_KEY" $prefix) .existingSecret "secret_access_key") }}
{{- end }}
{{- with .Values.eventsToken }}
{{- if or .existingSecret .value }}
{{ include "portico.secretEnv" (list "PORTICO_EVENTS_TOKEN" (default $secret .existingSecret) (ternary "token" "events_token" (ne .existingSecret ""))) }}
{{- end }}
{{- end }}
{{- if include "portico.clusterOn" . }}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: PORTICO_CLUSTER_ADVERTISE
  value: "$(POD_IP):{{ int .Values.cluster.port }}"
{{- if .Values.cluster.zoneFromPodLabel }}
- name: PORTICO_CLUSTER_ZONE
  valueFrom:
    fieldRef:
      fieldPath: metadata.labels['topology.kubernetes.io/zone']
{{- end }}
{{ include "portico.secretEnv" (list "PORTICO_CLUSTER_SECRET" (default $secret .Values.cluster.existingSecret) (ternary "secret" "cluster_secret" (ne .Values.cluster.existingSecret ""))) }}
{{- end }}
{{- with .Values.otel }}
{{- if .endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .endpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ .protocol | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ include "portico.fullname" $ | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The Portico container, shared by the StatefulSet and the sidecar template. */}}
{{- define "portico.container" -}}
name: portico
image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
imagePullPolicy: {{ .Values.image.pullPolicy }}
args: ["--config", "/etc/portico/portico.toml"]
{{- $env := include "portico.env" . | trim }}
{{- if $env }}
env:
{{ $env | indent 2 }}
{{- end }}
ports:
  - name: s3
    containerPort: {{ .Values.service.s3Port }}
    protocol: TCP
  - name: admin
    containerPort: {{ .Values.service.adminPort }}
    protocol: TCP
{{- if include "portico.clusterOn" . }}
  - name: peer
    containerPort: {{ .Values.cluster.port }}
    protocol: TCP
{{- end }}
livenessProbe:
  httpGet:
    path: /healthz
    port: admin
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: admin
  periodSeconds: 5
  failureThreshold: 2
resources:
{{ include "portico.resources" . | indent 2 }}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
volumeMounts:
  - name: portico-config
    mountPath: /etc/portico/portico.toml
    subPath: portico.toml
    readOnly: true
  - name: portico-cache
    mountPath: {{ .Values.config.cache.dir | default "/var/cache/portico" }}
{{- if .Values.clientCredentials.credentialsFileSecret }}
  - name: portico-credentials
    mountPath: /etc/portico/credentials
    readOnly: true
{{- end }}
{{- if and (include "portico.clusterOn" .) .Values.cluster.tls.secretName }}
  - name: portico-cluster-tls
    mountPath: /etc/portico/cluster-tls
    readOnly: true
{{- end }}
{{- end -}}

{{/* Volumes for the config and credentials (the cache volume is added by the workload). */}}
{{- define "portico.configVolumes" -}}
- name: portico-config
  configMap:
    name: {{ include "portico.fullname" . }}
{{- if .Values.clientCredentials.credentialsFileSecret }}
- name: portico-credentials
  secret:
    secretName: {{ .Values.clientCredentials.credentialsFileSecret }}
{{- end }}
{{- if and (include "portico.clusterOn" .) .Values.cluster.tls.secretName }}
- name: portico-cluster-tls
  secret:
    secretName: {{ .Values.cluster.tls.secretName }}
{{- end }}
{{- end -}}

{{- define "portico.emptyDirCache" -}}
- name: portico-cache
  emptyDir:
    {{- with .Values.cacheVolume.emptyDir.medium }}
    medium: {{ . }}
    {{- end }}
    {{- with .Values.cacheVolume.emptyDir.sizeLimit }}
    sizeLimit: {{ . }}
    {{- end }}
{{- end -}}

{{/*
Sidecar use: with this chart as a dependency of yours (mode: sidecar in its values), add
to your pod spec:

  initContainers:            # a native sidecar (sidecar.native: true, Kubernetes 1.29+)
    {{- include "portico.sidecar.container" .Subcharts.portico | nindent 4 }}
  volumes:
    {{- include "portico.sidecar.volumes" .Subcharts.portico | nindent 4 }}

With sidecar.native: false, include the container under containers: instead.
*/}}
{{- define "portico.sidecar.container" -}}
- {{ include "portico.container" . | indent 2 | trim }}
{{- if .Values.sidecar.native }}
  restartPolicy: Always
{{- end }}
{{- end -}}

{{- define "portico.sidecar.volumes" -}}
{{ include "portico.configVolumes" . }}
{{- if .Values.cacheVolume.existingClaim }}
- name: portico-cache
  persistentVolumeClaim:
    claimName: {{ .Values.cacheVolume.existingClaim }}
{{- else }}
{{ include "portico.emptyDirCache" . }}
{{- end }}
{{- end -}}

{{/* Fails the install when the rendered configuration could not start. */}}
{{- define "portico.validate" -}}
{{- $auth := default dict .Values.config.auth -}}
{{- $credentials := .Values.clientCredentials -}}
{{- if and (ne (default "sigv4" $auth.mode) "none") (not (or $credentials.existingSecret $credentials.accessKeyId $credentials.credentialsFileSecret)) -}}
{{- fail "config.auth.mode is sigv4 (the default), so clients need a credential: set clientCredentials.accessKeyId and secretAccessKey, clientCredentials.existingSecret or clientCredentials.credentialsFileSecret; or set config.auth.mode: none for a sidecar listening on 127.0.0.1" -}}
{{- end -}}
{{- if and $credentials.accessKeyId (not $credentials.secretAccessKey) -}}
{{- fail "clientCredentials.accessKeyId needs clientCredentials.secretAccessKey" -}}
{{- end -}}
{{- if and .Values.upstreamCredentials.accessKeyId (not .Values.upstreamCredentials.secretAccessKey) -}}
{{- fail "upstreamCredentials.accessKeyId needs upstreamCredentials.secretAccessKey" -}}
{{- end -}}
{{- end -}}
