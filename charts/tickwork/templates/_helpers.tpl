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

{{/* The Secret and key holding the database URLs. */}}
{{- define "tickwork.databaseSecret" -}}
{{- if .Values.database.existingSecret -}}
{{- .Values.database.existingSecret -}}
{{- else -}}
{{- printf "%s-database" (include "tickwork.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "tickwork.postgresqlName" -}}
{{- printf "%s-postgresql" (include "tickwork.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Environment of every role: the shards, the database URLs, logging. */}}
{{- define "tickwork.env" -}}
- name: TICKWORK_SHARDS
  value: {{ .Values.shards | quote }}
- name: TICKWORK_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "tickwork.databaseSecret" . }}
      key: {{ .Values.database.secretKey }}
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
