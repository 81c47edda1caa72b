{{/*
Names, labels and the pieces both Deployments share. Everything a test or another template needs
to agree on (service account names, webhook names, the TLS Secret) is defined once here.
*/}}

{{- define "gpuclass.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-<chart>, or the release name alone when it already contains the chart name. */}}
{{- define "gpuclass.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "gpuclass.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpuclass.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "gpuclass.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuclass
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: call with (dict "root" $ "component" "webhook"). */}}
{{- define "gpuclass.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuclass.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpuclass.componentLabels" -}}
{{ include "gpuclass.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpuclass.webhook.fullname" -}}
{{- printf "%s-webhook" (include "gpuclass.fullname" .) -}}
{{- end -}}

{{- define "gpuclass.reconciler.fullname" -}}
{{- printf "%s-reconciler" (include "gpuclass.fullname" .) -}}
{{- end -}}

{{- define "gpuclass.webhook.serviceAccountName" -}}
{{- if .Values.webhook.serviceAccount.create -}}
{{- default (include "gpuclass.webhook.fullname" .) .Values.webhook.serviceAccount.name -}}
{{- else -}}
{{- required "webhook.serviceAccount.name is required when webhook.serviceAccount.create is false" .Values.webhook.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gpuclass.reconciler.serviceAccountName" -}}
{{- if .Values.reconciler.serviceAccount.create -}}
{{- default (include "gpuclass.reconciler.fullname" .) .Values.reconciler.serviceAccount.name -}}
{{- else -}}
{{- required "reconciler.serviceAccount.name is required when reconciler.serviceAccount.create is false" .Values.reconciler.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The user the API server sees for the reconciler: the license-copy policy matches on it. */}}
{{- define "gpuclass.reconciler.username" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "gpuclass.reconciler.serviceAccountName" .) -}}
{{- end -}}

{{- define "gpuclass.webhook.username" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "gpuclass.webhook.serviceAccountName" .) -}}
{{- end -}}

{{- define "gpuclass.priorityClassName" -}}
{{- if .Values.priorityClass.create -}}
{{- default (printf "%s-critical" (include "gpuclass.fullname" .)) .Values.priorityClass.name -}}
{{- else -}}
{{- .Values.priorityClass.name -}}
{{- end -}}
{{- end -}}

{{/* Webhook configuration object names (the cleanup hook deletes exactly these). */}}
{{- define "gpuclass.mutatingWebhookName" -}}
{{- include "gpuclass.webhook.fullname" . -}}
{{- end -}}

{{- define "gpuclass.validatingWebhookName" -}}
{{- include "gpuclass.webhook.fullname" . -}}
{{- end -}}

{{- define "gpuclass.webhook.tlsSecretName" -}}
{{- printf "%s-tls" (include "gpuclass.webhook.fullname" .) -}}
{{- end -}}

{{/*
Who makes and renews the webhook's certificate: "webhook" (the default: the webhook keeps its own
CA in the Secret <fullname>-certs and the caBundles current), "helm" (templates/_tls.tpl, renewed
on helm upgrade) or "certManager". tls.certManager.enabled=true, the older spelling, still selects
cert-manager.
*/}}
{{- define "gpuclass.tlsMode" -}}
{{- if .Values.tls.certManager.enabled -}}certManager{{- else -}}{{ .Values.tls.mode }}{{- end -}}
{{- end -}}

{{/* The Secret the webhook keeps its own CA and certificate in (mode "webhook"). */}}
{{- define "gpuclass.webhook.certsSecretName" -}}
{{- printf "%s-certs" (include "gpuclass.webhook.fullname" .) -}}
{{- end -}}

{{/* The Secret whose ca.crt a scraper trusts: the webhook's own in mode "webhook". */}}
{{- define "gpuclass.webhook.servingSecretName" -}}
{{- if eq (include "gpuclass.tlsMode" .) "webhook" -}}
{{- include "gpuclass.webhook.certsSecretName" . -}}
{{- else -}}
{{- include "gpuclass.webhook.tlsSecretName" . -}}
{{- end -}}
{{- end -}}

{{/* The DNS names of the serving certificate, in every mode. */}}
{{- define "gpuclass.webhook.dnsNames" -}}
{{- $svc := include "gpuclass.webhook.fullname" . -}}
{{- $host := include "gpuclass.webhook.serviceHost" . -}}
{{- list $svc (printf "%s.%s" $svc .Release.Namespace) $host (printf "%s.cluster.local" $host) | join "," -}}
{{- end -}}

{{- define "gpuclass.webhook.certificateName" -}}
{{- include "gpuclass.webhook.fullname" . -}}
{{- end -}}

{{/* The DNS name the API server dials: <service>.<namespace>.svc */}}
{{- define "gpuclass.webhook.serviceHost" -}}
{{- printf "%s.%s.svc" (include "gpuclass.webhook.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/*
image reference: call with (dict "image" .Values.x.image "root" $).
global.imageRegistry replaces the registry of the repository: its first path component when that
names a host (has a "." or ":", or is "localhost", as Docker decides), else it is prefixed.
*/}}
{{- define "gpuclass.image" -}}
{{- $repository := .image.repository -}}
{{- with (.root.Values.global | default dict).imageRegistry -}}
{{- $parts := splitList "/" $repository -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- $parts = rest $parts -}}
{{- end -}}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) (join "/" $parts) -}}
{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Pod-level security context shared by every Pod of the chart. */}}
{{- define "gpuclass.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Container-level security context: every container of the chart carries all of it. */}}
{{- define "gpuclass.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
Scheduling of a replicated component: call with (dict "root" $ "component" "webhook" "values" .Values.webhook).
Anti-affinity spreads replicas over nodes (soft by default so that a one-node cluster still runs);
topology spread balances them over zones and nodes. A component's `affinity` and
`topologySpreadConstraints` values replace these defaults as a whole (a constraint without a
labelSelector gets the component's selector, without which it would count no Pod).
*/}}
{{- define "gpuclass.scheduling" -}}
{{- $selector := include "gpuclass.selectorLabels" (dict "root" .root "component" .component) | fromYaml -}}
{{- if .values.affinity }}
affinity:
  {{- toYaml .values.affinity | nindent 2 }}
{{- else }}
affinity:
  {{- with .values.nodeAffinity }}
  nodeAffinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  podAntiAffinity:
    {{- if eq .values.podAntiAffinity "hard" }}
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- toYaml $selector | nindent 12 }}
    {{- else }}
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- toYaml $selector | nindent 14 }}
    {{- end }}
{{- end }}
{{- if .values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- range .values.topologySpreadConstraints }}
  {{- $constraint := deepCopy . }}
  {{- if not (hasKey $constraint "labelSelector") }}
  {{- $_ := set $constraint "labelSelector" (dict "matchLabels" $selector) }}
  {{- end }}
  - {{- toYaml $constraint | nindent 4 }}
  {{- end }}
{{- else if .values.topologySpread }}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    matchLabelKeys: [pod-template-hash]
    labelSelector:
      matchLabels:
        {{- toYaml $selector | nindent 8 }}
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    matchLabelKeys: [pod-template-hash]
    labelSelector:
      matchLabels:
        {{- toYaml $selector | nindent 8 }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with include "gpuclass.priorityClassName" .root }}
priorityClassName: {{ . }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
