{{/*
Names and labels. Every object of a service is named <prefix>-<component> (prefix: fullnameOverride or the
release name), so `helm install agl ...` gives agl-helm-agl and agl-tofu-agl.
*/}}
{{- define "agl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "agl.prefix" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 54 | trimSuffix "-" -}}
{{- end -}}

{{- define "agl.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "agl.labels" -}}
helm.sh/chart: {{ include "agl.chart" . }}
app.kubernetes.io/name: {{ include "agl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cozystack-agl
{{- end -}}

{{/* Labels of one service's objects; call with (dict "root" $ "svc" $svc). */}}
{{- define "agl.svcLabels" -}}
{{ include "agl.labels" .root }}
app.kubernetes.io/component: {{ .svc.component }}
{{- end -}}

{{- define "agl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agl.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .svc.component }}
{{- end -}}

{{/* repository@digest when a digest is given (it wins over the tag), else repository:tag. */}}
{{- define "agl.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The enabled services as a YAML list: everything that differs between helm-agl and tofu-agl lives here, so
every template renders both from one definition. Templates read it with
  {{- range $svc := include "agl.services" . | fromYamlArray }}
*/}}
{{- define "agl.services" -}}
{{- $prefix := include "agl.prefix" . -}}
{{- $out := list -}}
{{- if .Values.helmAgl.enabled -}}
{{- $out = append $out (dict
      "key" "helmAgl"
      "component" "helm-agl"
      "module" "helm_agl"
      "name" (printf "%s-helm-agl" $prefix)
      "group" "apps.cozystack.io"
      "version" "v1alpha1"
      "backingGroup" "helm.toolkit.fluxcd.io"
      "backingResource" "helmreleases"
      "definitions" "applicationdefinitions"
      "crdFile" "files/crds/cozystack.io_applicationdefinitions.yaml"
      "args" (list)
      "values" .Values.helmAgl) -}}
{{- end -}}
{{- if .Values.tofuAgl.enabled -}}
{{- $out = append $out (dict
      "key" "tofuAgl"
      "component" "tofu-agl"
      "module" "tofu_agl"
      "name" (printf "%s-tofu-agl" $prefix)
      "group" .Values.tofuAgl.group
      "version" "v1alpha1"
      "backingGroup" "infra.contrib.fluxcd.io"
      "backingResource" "terraforms"
      "definitions" "tofuapplicationdefinitions"
      "crdFile" "files/crds/cozystack.io_tofuapplicationdefinitions.yaml"
      "readsPlans" true
      "args" (list "--group" .Values.tofuAgl.group)
      "values" .Values.tofuAgl) -}}
{{- end -}}
{{- $mode := .Values.tls.mode -}}
{{- range $svc := $out -}}
{{- $tls := $svc.values.tls -}}
{{- if eq $mode "existingSecret" -}}
{{- if not $tls.secretName -}}
{{- fail (printf "tls.mode existingSecret needs %s.tls.secretName (the Secret with tls.crt and tls.key)" $svc.key) -}}
{{- end -}}
{{- $_ := set $svc "tlsSecret" $tls.secretName -}}
{{- else -}}
{{- if and (eq $mode "values") (not (and $tls.caBundle $tls.cert $tls.key)) -}}
{{- fail (printf "tls.mode values needs %s.tls.caBundle, .cert and .key (PEM)" $svc.key) -}}
{{- end -}}
{{- $_ := set $svc "tlsSecret" (printf "%s-tls" $svc.name) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.tofuAgl.enabled (eq .Values.tofuAgl.group "apps.cozystack.io") -}}
{{- fail "tofuAgl.group must differ from apps.cozystack.io, the group helm-agl serves (here or in another release)" -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* The Secret holding a service's serving certificate (tls.crt, tls.key, ca.crt): the chart's own
<service>-tls, or the one named in values (tls.mode existingSecret). */}}
{{- define "agl.tlsSecret" -}}
{{- .tlsSecret -}}
{{- end -}}

{{/*
The certificate material the chart itself writes into the service's Secret, as YAML with ca.crt, tls.crt,
tls.key, each base64-encoded (a YAML round trip of the PEM text would drop the last one's final newline):
taken from values (tls.mode values) or generated (tls.mode generate). The other modes render no Secret.
Call with (dict "root" $ "svc" $svc).
*/}}
{{- define "agl.chartTLS" -}}
{{- $pem := dict -}}
{{- if eq .root.Values.tls.mode "values" -}}
{{- $tls := .svc.values.tls -}}
{{- $pem = dict "ca.crt" $tls.caBundle "tls.crt" $tls.cert "tls.key" $tls.key -}}
{{- else -}}
{{- $pem = include "agl.generatedTLS" . | fromYaml -}}
{{- end -}}
{{- $out := dict -}}
{{- range $key, $value := $pem -}}
{{- $_ := set $out $key ($value | b64enc) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* Whether the chart writes the service's Secret itself ("true" or ""). */}}
{{- define "agl.chartWritesTLS" -}}
{{- if has .Values.tls.mode (list "values" "generate") -}}true{{- end -}}
{{- end -}}

{{/* DNS names kube-apiserver may use to reach a service. Call with (dict "root" $ "svc" $svc). */}}
{{- define "agl.dnsNames" -}}
{{- $ns := .root.Release.Namespace -}}
{{- toYaml (list .svc.name (printf "%s.%s" .svc.name $ns) (printf "%s.%s.svc" .svc.name $ns)
     (printf "%s.%s.svc.cluster.local" .svc.name $ns)) -}}
{{- end -}}

{{/*
The generated certificate of one service (without cert-manager), as YAML with ca.crt, tls.crt, tls.key.
Reuses the Secret already in the cluster when it is complete, so upgrades keep the CA that the APIService
trusts; otherwise generates a CA and a serving certificate. The result is memoised for the rest of the
render: the Secret, the APIService's caBundle and the Deployment's checksum must see the same certificate.
*/}}
{{- define "agl.generatedTLS" -}}
{{- $root := .root -}}
{{- $svc := .svc -}}
{{- $memo := $root.Values._generatedTLS | default dict -}}
{{- if not (hasKey $memo $svc.name) -}}
{{- $pem := dict -}}
{{- $existing := lookup "v1" "Secret" $root.Release.Namespace (include "agl.tlsSecret" $svc) -}}
{{- if and $existing $existing.data (index $existing.data "ca.crt") (index $existing.data "tls.crt") (index $existing.data "tls.key") -}}
{{- $pem = dict "ca.crt" (index $existing.data "ca.crt" | b64dec) "tls.crt" (index $existing.data "tls.crt" | b64dec) "tls.key" (index $existing.data "tls.key" | b64dec) -}}
{{- else -}}
{{- $days := int $root.Values.tls.validityDays -}}
{{- $ca := genCA (printf "%s-ca" $svc.name) $days -}}
{{- $hosts := include "agl.dnsNames" . | fromYamlArray -}}
{{- $cert := genSignedCert (printf "%s.%s.svc" $svc.name $root.Release.Namespace) nil $hosts $days $ca -}}
{{- $pem = dict "ca.crt" $ca.Cert "tls.crt" $cert.Cert "tls.key" $cert.Key -}}
{{- end -}}
{{- $_ := set $memo $svc.name $pem -}}
{{- $_ := set $root.Values "_generatedTLS" $memo -}}
{{- end -}}
{{- toYaml (index $memo $svc.name) -}}
{{- end -}}

{{/* The cert-manager Certificate name of one service's serving certificate. */}}
{{- define "agl.certificate" -}}
{{- printf "%s-serving" .name -}}
{{- end -}}
