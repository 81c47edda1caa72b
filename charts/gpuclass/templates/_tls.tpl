{{/*
The webhook's serving certificate when cert-manager is not used ("self-managed").

Two Secrets: the serving Secret the webhook mounts (ca.crt, tls.crt, tls.key: never the CA's private
key, so whoever can read what the webhook reads cannot sign certificates) and `<serving>-ca` (ca.crt,
ca.key), which nothing mounts and only Helm reads.

Helm's genCA/genSignedCert make new keys on every render, so the chart reuses what it made before:
it looks both Secrets up (`lookup`, live on install/upgrade; empty under `helm template`) and
  * reuses CA and certificate while the certificate has more than renewBeforeDays left and was made
    for this Service's DNS name;
  * otherwise re-signs a new certificate with the *same* CA while the CA has more than renewBeforeDays
    left — the caBundle does not change, so old and new webhook Pods are trusted during the rollout;
  * otherwise (first install, Secret deleted, CA near its end) makes a new CA and certificate.
Releases before the split kept ca.key in the serving Secret; it is read from there once, when no CA
Secret exists yet, so an upgrade keeps the CA (and the caBundle) and moves its key out.
The result is computed once per render and memoised on the root context, so the Secrets, both webhook
configurations' caBundle and the Deployment's checksum annotation always agree.
Returns YAML: {caCert, cert, key, caNotAfter, certNotAfter, generated}.
*/}}

{{- define "gpuclass.webhook.caSecretName" -}}
{{- printf "%s-ca" (include "gpuclass.webhook.tlsSecretName" .) -}}
{{- end -}}

{{- /* call with (dict "root" $ "name" NAME) */ -}}
{{- define "gpuclass.webhook.existingSecret" -}}
{{- /* the only cluster read of the chart; tests/chart_helpers.py swaps this line for a fixture */ -}}
{{- lookup "v1" "Secret" .root.Release.Namespace .name | toYaml -}}
{{- end -}}

{{- define "gpuclass.webhook.selfManagedTLS" -}}
{{- if not (hasKey . "gpuclassWebhookTLS") -}}
{{- $cfg := .Values.tls.selfManaged -}}
{{- $host := include "gpuclass.webhook.serviceHost" . -}}
{{- $svc := include "gpuclass.webhook.fullname" . -}}
{{- $dnsNames := list $svc (printf "%s.%s" $svc .Release.Namespace) $host (printf "%s.cluster.local" $host) -}}
{{- $layout := "2006-01-02T15:04:05Z07:00" -}}
{{- $renewAt := now | dateModify (printf "+%dh" (mul (int $cfg.renewBeforeDays) 24)) -}}
{{- $existing := include "gpuclass.webhook.existingSecret" (dict "root" . "name" (include "gpuclass.webhook.tlsSecretName" .)) | fromYaml | default dict -}}
{{- $existingCA := include "gpuclass.webhook.existingSecret" (dict "root" . "name" (include "gpuclass.webhook.caSecretName" .)) | fromYaml | default dict -}}
{{- $data := get $existing "data" | default dict -}}
{{- $annotations := get (get $existing "metadata" | default dict) "annotations" | default dict -}}
{{- $caData := get $existingCA "data" | default dict -}}
{{- $caAnnotations := get (get $existingCA "metadata" | default dict) "annotations" | default dict -}}
{{- if and (not $existingCA) (get $data "ca.key") -}}
{{- /* migration from the single-Secret layout: its CA moves to the CA Secret */ -}}
{{- $caData = $data -}}
{{- $caAnnotations = $annotations -}}
{{- end -}}
{{- $caPem := get $caData "ca.crt" | default "" | b64dec -}}
{{- $caKeyPem := get $caData "ca.key" | default "" | b64dec -}}
{{- $certPem := get $data "tls.crt" | default "" | b64dec -}}
{{- $keyPem := get $data "tls.key" | default "" | b64dec -}}
{{- $caNotAfter := get $caAnnotations "gpuclass.cozystack.io/ca-not-after" | default "" -}}
{{- $certNotAfter := get $annotations "gpuclass.cozystack.io/cert-not-after" | default "" -}}
{{- $sameCA := eq (get $data "ca.crt" | default "") (get $caData "ca.crt" | default "-") -}}
{{- $sameHost := eq (get $annotations "gpuclass.cozystack.io/service-host" | default "") $host -}}
{{- $caUsable := and $caPem $caKeyPem $caNotAfter -}}
{{- if $caUsable -}}
{{- $caUsable = $renewAt.Before (toDate $layout $caNotAfter) -}}
{{- end -}}
{{- $certUsable := and $caUsable $sameCA $sameHost $certPem $keyPem $certNotAfter -}}
{{- if $certUsable -}}
{{- $certUsable = $renewAt.Before (toDate $layout $certNotAfter) -}}
{{- end -}}
{{- $tls := dict "generated" "none" -}}
{{- if $certUsable -}}
{{- $tls = dict "caCert" $caPem "caKey" $caKeyPem "cert" $certPem "key" $keyPem "caNotAfter" $caNotAfter "certNotAfter" $certNotAfter "generated" "none" -}}
{{- else -}}
{{- $ca := dict -}}
{{- $generated := "certificate" -}}
{{- if $caUsable -}}
{{- $ca = buildCustomCert ($caPem | b64enc) ($caKeyPem | b64enc) -}}
{{- else -}}
{{- $ca = genCA "gpuclass-webhook-ca" (int $cfg.caValidityDays) -}}
{{- $caNotAfter = dateInZone $layout (now | dateModify (printf "+%dh" (mul (int $cfg.caValidityDays) 24))) "UTC" -}}
{{- $generated = "ca-and-certificate" -}}
{{- end -}}
{{- $cert := genSignedCert $host nil $dnsNames (int $cfg.certValidityDays) $ca -}}
{{- $certNotAfter = dateInZone $layout (now | dateModify (printf "+%dh" (mul (int $cfg.certValidityDays) 24))) "UTC" -}}
{{- $tls = dict "caCert" $ca.Cert "caKey" $ca.Key "cert" $cert.Cert "key" $cert.Key "caNotAfter" $caNotAfter "certNotAfter" $certNotAfter "generated" $generated -}}
{{- end -}}
{{- $_ := set . "gpuclassWebhookTLS" $tls -}}
{{- end -}}
{{- get . "gpuclassWebhookTLS" | toYaml -}}
{{- end -}}

{{/* caBundle for the webhook configurations (self-managed mode only). */}}
{{- define "gpuclass.webhook.caBundle" -}}
{{- (include "gpuclass.webhook.selfManagedTLS" . | fromYaml).caCert | b64enc -}}
{{- end -}}

{{/* webhook clientConfig, shared by the four webhooks: call with (dict "root" $ "path" "/x") */}}
{{- define "gpuclass.webhook.clientConfig" -}}
service:
  name: {{ include "gpuclass.webhook.fullname" .root }}
  namespace: {{ .root.Release.Namespace }}
  port: 443
  path: {{ .path }}
{{- if not .root.Values.tls.certManager.enabled }}
caBundle: {{ include "gpuclass.webhook.caBundle" .root }}
{{- end }}
{{- end -}}

{{/* Annotations of the webhook configurations: cert-manager's cainjector fills caBundle. */}}
{{- define "gpuclass.webhook.configurationAnnotations" -}}
{{- if .Values.tls.certManager.enabled -}}
cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "gpuclass.webhook.certificateName" .) }}
{{- end -}}
{{- end -}}
