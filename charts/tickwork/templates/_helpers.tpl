{{/* Names, labels and the pieces every role's pod shares. */}}

{{- define "tickwork.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tickwork.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The name of one component's objects: fullname-component. */}}
{{- define "tickwork.component" -}}
{{- printf "%s-%s" (include "tickwork.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tickwork.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "tickwork.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tickwork
{{- end -}}

{{- define "tickwork.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tickwork.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tickwork.componentLabels" -}}
{{ include "tickwork.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tickwork.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
The name of an object outside the release namespace (cluster-scoped, or in a team's
or a watched namespace): the release's own name qualified by its namespace, so two
releases (even of the same name, in two namespaces) never share one.
*/}}
{{- define "tickwork.clusterName" -}}
{{- printf "%s.%s" .name (.root.Release.Namespace | default "default") -}}
{{- end -}}

{{/* The release's ValidatingWebhookConfiguration (the operator's default name,
scheduledjobs.tickwork.dev, qualified by the release and its namespace). */}}
{{- define "tickwork.webhookConfiguration" -}}
{{- printf "%s.%s.scheduledjobs.tickwork.dev" (include "tickwork.fullname" .) (.Release.Namespace | default "default") -}}
{{- end -}}

{{/* The Secret and key holding the database URLs. */}}
{{- define "tickwork.databaseSecret" -}}
{{- if .Values.database.existingSecret -}}
{{- .Values.database.existingSecret -}}
{{- else -}}
{{- printf "%s-database" (include "tickwork.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* "true" when the bundled PostgreSQL's password is drawn at install by the secrets
hook (no password given): a render holds no random value. */}}
{{- define "tickwork.generatesDatabase" -}}
{{- if and .Values.postgresql.enabled (not .Values.postgresql.password) (not .Values.database.existingSecret) (not .Values.database.shardSecrets) -}}true{{- end -}}
{{- end -}}

{{/* The dashboard's session secret: the given Secret, or the one the hook draws. */}}
{{- define "tickwork.uiSecret" -}}
{{- if .Values.dispatcher.uiSecret.existingSecret -}}
{{- .Values.dispatcher.uiSecret.existingSecret -}}
{{- else -}}
{{- printf "%s-ui" (include "tickwork.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* "true" when the webhook's certificate is drawn at install by the secrets hook
(no cert-manager). */}}
{{- define "tickwork.generatesWebhookCertificate" -}}
{{- if and .Values.operator.enabled .Values.operator.webhook.enabled (not .Values.operator.webhook.certManager.enabled) -}}true{{- end -}}
{{- end -}}

{{- define "tickwork.postgresqlName" -}}
{{- printf "%s-postgresql" (include "tickwork.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Environment of every role: the shards, the database URLs, logging, extraEnv. */}}
{{- define "tickwork.env" -}}
- name: TICKWORK_SHARDS
  value: {{ .Values.shards | quote }}
{{- with .Values.database.shardSecrets }}
{{- $refs := list }}
{{- range $shard, $ref := . }}
{{- $variable := printf "DATABASE_URL_SHARD_%d" $shard }}
{{- $refs = append $refs (printf "$(%s)" $variable) }}
- name: {{ $variable }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.name }}
      key: {{ $ref.key }}
{{- end }}
# Each shard's URL (and password) from a Secret of its own, joined here by the kubelet.
- name: TICKWORK_DATABASE_URL
  value: {{ join " " $refs | quote }}
{{- else }}
- name: TICKWORK_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "tickwork.databaseSecret" . }}
      key: {{ .Values.database.secretKey }}
{{- end }}
- name: TICKWORK_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
- name: TICKWORK_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* A writable /tmp on the read-only root filesystem. */}}
{{- define "tickwork.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end -}}

{{- define "tickwork.tmpMount" -}}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* A role's volumes and its container's mounts: /tmp and extraVolumes(Mounts). */}}
{{- define "tickwork.volumes" -}}
{{ include "tickwork.tmpVolume" . }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "tickwork.volumeMounts" -}}
{{ include "tickwork.tmpMount" . }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
A pod's labels: its selector labels, over podLabels and the role's podLabels (the
chart's own cannot be overridden: the Deployments and policies select by them).
*/}}
{{- define "tickwork.podLabels" -}}
{{- $own := include "tickwork.selectorLabels" (dict "root" .root "component" .component) | fromYaml }}
{{- $labels := merge $own (.values.podLabels | default dict) (.root.Values.podLabels | default dict) }}
{{- toYaml $labels }}
{{- end -}}

{{/* A pod's annotations: podAnnotations, the role's over them, and `extra`. */}}
{{- define "tickwork.podAnnotations" -}}
{{- $annotations := merge (.extra | default dict) (.values.podAnnotations | default dict) (.root.Values.podAnnotations | default dict) }}
{{- with $annotations }}
{{- toYaml . }}
{{- end }}
{{- end -}}

{{/*
Where a role's pods run: priorityClassName (the role's, else the global one),
nodeSelector, tolerations, affinity (else the role's antiAffinity, where it has one)
and topologySpreadConstraints (one without labelSelector spreads the role's pods).
*/}}
{{- define "tickwork.scheduling" -}}
{{- $values := .values }}
{{- $selector := include "tickwork.selectorLabels" (dict "root" .root "component" .component) | fromYaml }}
{{- with (default .root.Values.priorityClassName $values.priorityClassName) }}
priorityClassName: {{ . }}
{{- end }}
{{- with $values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $values.affinity }}
affinity:
  {{- toYaml $values.affinity | nindent 2 }}
{{- else if eq (default "none" $values.antiAffinity) "hard" }}
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- toYaml $selector | nindent 12 }}
{{- else if eq (default "none" $values.antiAffinity) "soft" }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- toYaml $selector | nindent 14 }}
{{- end }}
{{- with $values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- range . }}
  {{- $constraint := deepCopy . }}
  {{- if not (hasKey $constraint "labelSelector") }}
  {{- $_ := set $constraint "labelSelector" (dict "matchLabels" $selector) }}
  {{- end }}
  - {{ toYaml $constraint | indent 4 | trim }}
  {{- end }}
{{- end }}
{{- end -}}

{{- define "tickwork.podSpecCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* The webhook's Service name and the DNS name its certificate is for. */}}
{{- define "tickwork.webhookService" -}}
{{- printf "%s-webhook" (include "tickwork.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tickwork.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "tickwork.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The operator's rules: see rbac-operator.yaml. */}}
{{- define "tickwork.operatorRules" -}}
- apiGroups: ["tickwork.dev"]
  resources: ["scheduledjobs"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["tickwork.dev"]
  resources: ["scheduledjobs/status"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end -}}

{{/* The dispatcher's serving certificate: an existing Secret, or cert-manager's. */}}
{{- define "tickwork.dispatcherTlsSecret" -}}
{{- if .Values.dispatcher.tls.existingSecret -}}
{{- .Values.dispatcher.tls.existingSecret -}}
{{- else -}}
{{- printf "%s-dispatcher-tls" (include "tickwork.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The name of the dispatcher's port, and of its Service's: what it speaks. */}}
{{- define "tickwork.dispatcherPort" -}}
{{- if .Values.dispatcher.tls.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* A probe's httpGet on the dispatcher's port. */}}
{{- define "tickwork.dispatcherProbe" -}}
httpGet:
  path: {{ .path }}
  port: {{ include "tickwork.dispatcherPort" .root }}
  {{- if .root.Values.dispatcher.tls.enabled }}
  scheme: HTTPS
  {{- end }}
{{- end -}}

{{/* policyTypes and egress of a tickwork role's NetworkPolicy. */}}
{{- define "tickwork.policyEgress" -}}
{{- $egress := .Values.networkPolicy.egress -}}
{{- if $egress.enabled -}}
policyTypes: [Ingress, Egress]
egress:
  # Name lookups, to wherever the cluster's resolver is (a node-local cache too).
  - ports:
      - {port: 53, protocol: UDP}
      - {port: 53, protocol: TCP}
  {{- if .Values.postgresql.enabled }}
  - to:
      - podSelector:
          matchLabels:
            {{- include "tickwork.selectorLabels" (dict "root" . "component" "postgresql") | nindent 12 }}
    ports:
      - {port: 5432, protocol: TCP}
  {{- end }}
  {{- with $egress.extraRules }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- else -}}
policyTypes: [Ingress]
{{- end -}}
{{- end -}}

{{/*
The pod of one of the chart's hook Jobs (secrets, uninstall): the tickwork image with
the lifecycle command, scheduled and labelled like the migration Job, as the hook's
own ServiceAccount (it calls the API server). `args` are the command's.
*/}}
{{- define "tickwork.hookPod" -}}
{{- $values := .root.Values.migrate }}
metadata:
  labels:
    {{- include "tickwork.podLabels" (dict "root" .root "component" .component "values" $values) | nindent 4 }}
  {{- with include "tickwork.podAnnotations" (dict "root" .root "values" $values) }}
  annotations:
    {{- . | nindent 4 }}
  {{- end }}
spec:
  restartPolicy: Never
  serviceAccountName: {{ include "tickwork.component" (dict "root" .root "component" .component) }}
  automountServiceAccountToken: true
  {{- include "tickwork.podSpecCommon" .root | trim | nindent 2 }}
  {{- with include "tickwork.scheduling" (dict "root" .root "component" .component "values" $values) | trim }}
  {{- . | nindent 2 }}
  {{- end }}
  containers:
    - name: {{ .component }}
      image: {{ include "tickwork.image" .root }}
      imagePullPolicy: {{ .root.Values.image.pullPolicy }}
      command: [python, -m, tickwork.operator.lifecycle]
      args:
        {{- toYaml .args | nindent 8 }}
      securityContext:
        {{- toYaml .root.Values.securityContext | nindent 8 }}
      resources:
        {{- toYaml $values.resources | nindent 8 }}
      volumeMounts:
        {{- include "tickwork.tmpMount" .root | nindent 8 }}
  volumes:
    {{- include "tickwork.tmpVolume" .root | nindent 4 }}
{{- end -}}

{{/* The annotations of a hook's objects: the hook, its order, and its cleanup (the
previous run's objects go before a new run; a run's go once it succeeded, a failed
one's stay for its logs). */}}
{{- define "tickwork.hookAnnotations" -}}
helm.sh/hook: {{ .hook }}
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end -}}
