package k8s_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// chartBundle indexes a rendering's objects.
type chartBundle struct {
	*bundle
	r               *rendered
	deployment      *appsv1.Deployment
	serviceAccounts []*corev1.ServiceAccount
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	serviceMonitors []*serviceMonitor
	prometheusRules []*prometheusRule
	podLabels       labels.Set
	sidecar         *corev1.Container
	volumes         map[string]*corev1.Volume
	sidecarArgs     map[string]string
}

// checkChart checks a rendering as checkDeployment checks k8s/, for a
// central service: the sidecar listens on the pod address for Envoys in
// other pods, the probes, mounts, Secrets and flags fit together, and the
// other objects point at the Deployment, its pods and its ports.
func checkChart(t *testing.T, r *rendered) error {
	t.Helper()
	cb := &chartBundle{bundle: index(r.objs), r: r}
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	for _, o := range r.objs {
		switch v := o.obj.(type) {
		case *corev1.ServiceAccount:
			cb.serviceAccounts = append(cb.serviceAccounts, v)
		case *policyv1.PodDisruptionBudget:
			cb.pdbs = append(cb.pdbs, v)
		case *autoscalingv2.HorizontalPodAutoscaler:
			cb.hpas = append(cb.hpas, v)
		case *serviceMonitor:
			cb.serviceMonitors = append(cb.serviceMonitors, v)
		case *prometheusRule:
			cb.prometheusRules = append(cb.prometheusRules, v)
		}
		errs = append(errs, checkChartMeta(o)...)
	}
	if len(cb.deployments) != 1 {
		fail("%d Deployments rendered, want 1", len(cb.deployments))
		return errors.Join(errs...)
	}
	cb.deployment = cb.deployments[0]
	cb.podLabels = labels.Set(cb.deployment.Spec.Template.Labels)
	errs = append(errs, checkChartDeployment(t, cb)...)
	for _, name := range sortedKeys(cb.services) {
		errs = append(errs, checkService(cb.bundle, cb.services[name])...)
	}
	for _, p := range cb.pdbs {
		if !selects(p.Spec.Selector, cb.podLabels) {
			fail("PodDisruptionBudget %q: selects no Deployment's pods", p.Name)
		}
	}
	for _, h := range cb.hpas {
		errs = append(errs, checkChartHPA(cb, h)...)
	}
	for _, np := range cb.policies {
		errs = append(errs, checkChartPolicy(cb, np)...)
	}
	for _, sm := range cb.serviceMonitors {
		errs = append(errs, checkServiceMonitor(cb, sm)...)
	}
	for _, pr := range cb.prometheusRules {
		if _, err := ruleGroups(pr); err != nil {
			fail("PrometheusRule %q: %v", pr.Name, err)
		}
	}
	for _, name := range sortedKeys(cb.configMaps) {
		for key, v := range cb.configMaps[name].Data {
			if strings.HasSuffix(key, ".json") {
				if err := checkDashboard([]byte(v)); err != nil {
					fail("ConfigMap %q key %q: %v", name, key, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// checkChartMeta checks what every object of the release carries: its
// namespace (so `helm template | kubectl apply` lands where `helm
// install` would) and the standard labels.
func checkChartMeta(o object) []error {
	var errs []error
	m := o.obj
	fail := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s %q: "+format, append([]any{o.kind, m.GetName()}, a...)...))
	}
	if m.GetNamespace() != chartNS {
		fail("namespace %q, want %q", m.GetNamespace(), chartNS)
	}
	l := m.GetLabels()
	for k, want := range map[string]string{
		"app.kubernetes.io/instance":   chartRelease,
		"app.kubernetes.io/managed-by": "Helm",
		"app.kubernetes.io/part-of":    "ratelimit-sidecar",
	} {
		if l[k] != want {
			fail("label %s=%q, want %q", k, l[k], want)
		}
	}
	for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/version", "helm.sh/chart"} {
		if l[k] == "" {
			fail("no label %s", k)
		}
	}
	return errs
}

func selects(sel *metav1.LabelSelector, set labels.Set) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && !s.Empty() && s.Matches(set)
}

func checkChartDeployment(t *testing.T, cb *chartBundle) []error {
	t.Helper()
	var errs []error
	d := cb.deployment
	fail := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("Deployment %q: "+format, append([]any{d.Name}, a...)...))
	}
	spec := &d.Spec.Template.Spec
	if !selects(d.Spec.Selector, cb.podLabels) {
		fail("selector does not match the pod template's labels")
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		fail("automountServiceAccountToken must be false: the sidecar never calls the API")
	}
	if psc := spec.SecurityContext; psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		fail("securityContext.seccompProfile must be RuntimeDefault")
	}
	for _, sa := range cb.serviceAccounts {
		if spec.ServiceAccountName != sa.Name {
			fail("serviceAccountName %q, but the chart renders ServiceAccount %q", spec.ServiceAccountName, sa.Name)
		}
		if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
			fail("ServiceAccount %q: automountServiceAccountToken must be false", sa.Name)
		}
	}
	if len(spec.Containers) != 1 || spec.Containers[0].Name != sidecarName || len(spec.InitContainers) != 0 {
		fail("want one container, %s", sidecarName)
		return errs
	}
	c := &spec.Containers[0]
	cb.sidecar = c
	cb.volumes = map[string]*corev1.Volume{}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		cb.volumes[v.Name] = v
		if v.ConfigMap != nil {
			if _, ok := cb.configMaps[v.ConfigMap.Name]; !ok && v.ConfigMap.Name != cb.r.str("rules.existingConfigMap") {
				fail("volume %q: ConfigMap %q is neither rendered nor rules.existingConfigMap", v.Name, v.ConfigMap.Name)
			}
		}
		if v.Secret != nil && v.Secret.SecretName == "" {
			fail("volume %q: Secret without a name", v.Name)
		}
	}
	for _, err := range checkContainer(spec, c, cb.volumes) {
		fail("container %q: %v", c.Name, err)
	}
	if len(c.Command) > 0 {
		fail("%s: set args, not command, so the image's entrypoint runs", sidecarName)
	}
	args, err := parseArgs(sidecarFlags(t), c.Args)
	if err != nil {
		fail("%s args: %v", sidecarName, err)
		return errs
	}
	cb.sidecarArgs = args
	for _, err := range checkChartArgs(cb) {
		fail("%s: %v", sidecarName, err)
	}
	for _, err := range checkChartEnv(cb) {
		fail("%s: %v", sidecarName, err)
	}
	return errs
}

// mountOf finds the volume mount that holds path p, and p's path inside it.
func mountOf(c *corev1.Container, volumes map[string]*corev1.Volume, p string) (*corev1.Volume, string, error) {
	p = path.Clean(p)
	for _, m := range c.VolumeMounts {
		dir := path.Clean(m.MountPath)
		rel, ok := strings.CutPrefix(p, dir)
		if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
			continue
		}
		v := volumes[m.Name]
		if v == nil {
			return nil, "", fmt.Errorf("volume %q of mount %s does not exist", m.Name, dir)
		}
		return v, strings.TrimPrefix(rel, "/"), nil
	}
	return nil, "", fmt.Errorf("%s is not in a mount", p)
}

func checkChartArgs(cb *chartBundle) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	c, args := cb.sidecar, cb.sidecarArgs

	// The rules: a ConfigMap mounted as a directory, or the image's.
	files, _ := cb.r.value("rules.files").(map[string]any)
	imageRules := len(files) == 0 && cb.r.str("rules.existingConfigMap") == ""
	if cfg, ok := args["config"]; imageRules {
		if _, _, err := mountOf(c, cb.volumes, cfg); cfg != "/etc/ratelimit-sidecar/" || err == nil {
			fail("--config=%s: without rules.files or rules.existingConfigMap, want the image's /etc/ratelimit-sidecar/, unmounted", cfg)
		}
	} else if !ok {
		fail("set --config to the rules ConfigMap's mount")
	} else if v, key, err := mountOf(c, cb.volumes, cfg); err != nil {
		fail("--config=%s: %v", cfg, err)
	} else if v.ConfigMap == nil {
		fail("--config=%s: volume %q is not a ConfigMap", cfg, v.Name)
	} else if cm, ok := cb.configMaps[v.ConfigMap.Name]; ok {
		if _, found := cm.Data[key]; key != "" && !found {
			fail("--config=%s: ConfigMap %q has no key %q", cfg, cm.Name, key)
		}
		if key == "" && !slices.ContainsFunc(sortedKeys(cm.Data), isRuleFile) {
			fail("--config=%s: ConfigMap %q has no .yaml or .yml key to read", cfg, cm.Name)
		}
	}

	// Listeners: gRPC and HTTP on the pod address, on the container's
	// ports; admin on loopback, on no port of the pod.
	listen := func(flag, portName, why string) int {
		addr, ok := args[flag]
		if !ok {
			fail("set --%s: its default is loopback", flag)
			return 0
		}
		_, port, loopback, err := splitAddr(addr)
		if err != nil {
			fail("--%s=%s: %v", flag, addr, err)
			return 0
		}
		if loopback {
			fail("--%s=%s is loopback: %s cannot reach it", flag, addr, why)
		}
		if n, err := containerPort(c, intstr.FromString(portName)); err != nil {
			fail("--%s: %v", flag, err)
		} else if int(n) != port {
			fail("--%s listens on %d, but container port %s is %d", flag, port, portName, n)
		}
		return port
	}
	listen("grpc-addr", "grpc", "Envoys in other pods")
	httpPort := listen("http-addr", "http", "the kubelet's probes")
	if addr, ok := args["admin-addr"]; !ok || addr == "" {
		fail("set --admin-addr to loopback: without it POST /json and /debug/* are served on --http-addr")
	} else if _, port, loopback, err := splitAddr(addr); err != nil || !loopback {
		fail("--admin-addr=%s must be loopback: POST /json spends quota", addr)
	} else if _, err := containerPort(c, intstr.FromInt(port)); err == nil {
		fail("--admin-addr port %d is a container port", port)
	}

	// Probes: /readyz gates start and traffic, /healthz restarts.
	for _, pr := range []struct {
		name, path string
		p          *corev1.Probe
	}{{"startupProbe", "/readyz", c.StartupProbe}, {"readinessProbe", "/readyz", c.ReadinessProbe}, {"livenessProbe", "/healthz", c.LivenessProbe}} {
		if pr.p == nil || pr.p.HTTPGet == nil {
			fail("%s: want an HTTP GET of %s", pr.name, pr.path)
			continue
		}
		if pr.p.HTTPGet.Path != pr.path {
			fail("%s: path %s, want %s", pr.name, pr.p.HTTPGet.Path, pr.path)
		}
		if n, err := containerPort(c, pr.p.HTTPGet.Port); err == nil && int(n) != httpPort {
			fail("%s probes port %d, but --http-addr listens on %d", pr.name, n, httpPort)
		}
	}

	// TLS files and password files: each in a mounted Secret (mounted
	// whole, so that renewals and rotations reach the pod), from the
	// Secret the values name.
	sentinelSecret := cb.r.str("redis.sentinel.existingSecret")
	if cb.r.str("redis.mode") != "sentinel" {
		sentinelSecret = ""
	}
	for _, p := range []struct{ flag, value, secret string }{
		{"redis-password-file", "redis.auth.existingSecret", cb.r.str("redis.auth.existingSecret")},
		{"redis-sentinel-password-file", "redis.sentinel.existingSecret", sentinelSecret},
	} {
		if _, ok := args[p.flag]; ok != (p.secret != "") {
			fail("--%s set: %v, but %s is %q", p.flag, ok, p.value, p.secret)
		}
	}
	tlsFiles := []struct{ flag, secret, key string }{
		{"redis-password-file", cb.r.str("redis.auth.existingSecret"), cb.r.str("redis.auth.passwordKey")},
		{"redis-sentinel-password-file", sentinelSecret, cb.r.str("redis.sentinel.passwordKey")},
		{"grpc-tls-cert", cb.r.str("grpc.tls.secretName"), "tls.crt"},
		{"grpc-tls-key", cb.r.str("grpc.tls.secretName"), "tls.key"},
		{"grpc-tls-client-ca", firstSet(cb.r.str("grpc.tls.clientCA.secretName"), cb.r.str("grpc.tls.secretName")), cb.r.str("grpc.tls.clientCA.key")},
		{"redis-tls-ca", cb.r.str("redis.tls.existingSecret"), cb.r.str("redis.tls.caKey")},
		{"redis-tls-cert", cb.r.str("redis.tls.existingSecret"), cb.r.str("redis.tls.certKey")},
		{"redis-tls-key", cb.r.str("redis.tls.existingSecret"), cb.r.str("redis.tls.keyKey")},
	}
	for _, f := range tlsFiles {
		p, ok := args[f.flag]
		if !ok {
			continue
		}
		v, key, err := mountOf(c, cb.volumes, p)
		switch {
		case err != nil:
			fail("--%s=%s: %v", f.flag, p, err)
		case v.Secret == nil:
			fail("--%s=%s: volume %q is not a Secret", f.flag, p, v.Name)
		case v.Secret.SecretName != f.secret:
			fail("--%s: from Secret %q, want %q", f.flag, v.Secret.SecretName, f.secret)
		case key != f.key:
			fail("--%s: key %q of Secret %q, want %q", f.flag, key, f.secret, f.key)
		}
	}
	if _, ok := args["grpc-tls-cert"]; ok != (cb.r.value("grpc.tls.enabled") == true) {
		fail("--grpc-tls-cert set: %v, but grpc.tls.enabled: %v", ok, !ok)
	}
	for _, m := range c.VolumeMounts {
		if v := cb.volumes[m.Name]; v != nil && v.Secret != nil && (m.SubPath != "" || m.SubPathExpr != "") {
			fail("mounts Secret volume %q with subPath: renewed files would never reach the container", m.Name)
		}
	}

	// Redis: one of the three kinds, and no password on the command line.
	var kinds []string
	for _, f := range []string{"redis-url", "redis-sentinel-master", "redis-cluster-addrs"} {
		if _, ok := args[f]; ok {
			kinds = append(kinds, f)
		}
	}
	if len(kinds) != 1 {
		fail("want one of --redis-url, --redis-sentinel-master and --redis-cluster-addrs, got %v", kinds)
	}
	if raw, ok := args["redis-url"]; ok {
		if u, err := url.Parse(raw); err != nil {
			fail("--redis-url: %v", err)
		} else if _, set := u.User.Password(); set {
			fail("--redis-url holds a password, which shows in the pod spec and in ps")
		}
	}
	for _, a := range c.Args {
		if strings.Contains(strings.ToLower(a), "password") && !strings.Contains(a, "-password-file") {
			fail("argument %q carries a password", a)
		}
	}

	// While Redis is away, each replica takes its share of every limit.
	replicas := 0
	if d := cb.deployment; d.Spec.Replicas != nil {
		replicas = int(*d.Spec.Replicas)
		if len(cb.hpas) > 0 {
			errs = append(errs, errors.New("the Deployment sets spec.replicas, which the HorizontalPodAutoscaler owns: every upgrade would reset the scale"))
		}
	} else if len(cb.hpas) > 0 && cb.hpas[0].Spec.MinReplicas != nil {
		replicas = int(*cb.hpas[0].Spec.MinReplicas)
	} else {
		replicas = 1
	}
	if mode := args["failure-mode"]; mode == "" || mode == "local" {
		div, err := strconv.Atoi(firstSet(args["local-fallback-divisor"], "1"))
		if err != nil {
			fail("--local-fallback-divisor: %v", err)
		} else if want := cb.r.value("failureMode.localFallbackDivisor"); want != nil && toInt(want) > 0 {
			if div != toInt(want) {
				fail("--local-fallback-divisor=%d, but failureMode.localFallbackDivisor is %d", div, toInt(want))
			}
		} else if div != replicas {
			fail("--local-fallback-divisor=%d, but %d replicas: in failure mode local they would together admit %d/%d of each limit", div, replicas, replicas, div)
		}
	}

	// The Go runtime's soft limit below the container's.
	if v, ok := args["memory-limit"]; ok {
		soft, err := resource.ParseQuantity(strings.TrimSuffix(v, "B"))
		limit, hasLimit := c.Resources.Limits[corev1.ResourceMemory]
		switch {
		case err != nil:
			fail("--memory-limit=%s: %v", v, err)
		case hasLimit && (soft.IsZero() || soft.Cmp(limit) >= 0):
			fail("--memory-limit=%s, want a soft limit below the container's %s", v, limit.String())
		}
	}

	// Drain, then finish calls, within the grace period.
	grace := time.Duration(30) * time.Second
	if p := cb.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; p != nil {
		grace = time.Duration(*p) * time.Second
	}
	drain, err1 := time.ParseDuration(firstSet(args["drain-delay"], "0s"))
	shutdown, err2 := time.ParseDuration(firstSet(args["shutdown-timeout"], "10s"))
	if err := errors.Join(err1, err2); err != nil {
		fail("%v", err)
	} else if drain+shutdown >= grace {
		fail("--drain-delay %s + --shutdown-timeout %s is not within terminationGracePeriodSeconds (%s)", drain, shutdown, grace)
	}
	return errs
}

func toInt(v any) int {
	switch n := v.(type) {
	case int:
		return n
	case int64:
		return int(n)
	case float64:
		return int(n)
	case json.Number:
		i, _ := n.Int64()
		return int(i)
	}
	return 0
}

// checkChartEnv checks that no password is in the environment, where a
// rotated Secret never reaches a running pod: the chart passes password
// files (checkChartArgs), and a password variable of extraEnv must at
// least come from a Secret.
func checkChartEnv(cb *chartBundle) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	for i := range cb.sidecar.Env {
		e := &cb.sidecar.Env[i]
		if strings.Contains(e.Name, "PASSWORD") && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			fail("env %s: not from a Secret", e.Name)
		}
	}
	return errs
}

func checkChartHPA(cb *chartBundle, h *autoscalingv2.HorizontalPodAutoscaler) []error {
	var errs []error
	fail := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler %q: "+format, append([]any{h.Name}, a...)...))
	}
	ref := h.Spec.ScaleTargetRef
	if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || ref.Name != cb.deployment.Name {
		fail("scales %s %q, which is not rendered", ref.Kind, ref.Name)
	}
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
		fail("minReplicas must be set and at most maxReplicas %d", h.Spec.MaxReplicas)
	}
	for _, m := range h.Spec.Metrics {
		if m.Resource == nil {
			continue
		}
		if _, ok := cb.sidecar.Resources.Requests[m.Resource.Name]; !ok {
			fail("scales on %s, which the container does not request", m.Resource.Name)
		}
	}
	return errs
}

func checkChartPolicy(cb *chartBundle, np *networkingv1.NetworkPolicy) []error {
	var errs []error
	fail := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("NetworkPolicy %q: "+format, append([]any{np.Name}, a...)...))
	}
	if !selects(&np.Spec.PodSelector, cb.podLabels) {
		fail("podSelector selects no Deployment's pods")
	}
	c := cb.sidecar
	if c == nil {
		return errs
	}
	open := map[int32]bool{}
	for i, in := range np.Spec.Ingress {
		if len(in.Ports) == 0 {
			fail("ingress[%d] opens every port, the admin listener's included", i)
		}
		for j, p := range in.Ports {
			if p.Port == nil {
				fail("ingress[%d].ports[%d] opens every port", i, j)
				continue
			}
			n, err := containerPort(c, *p.Port)
			if err != nil {
				fail("ingress[%d].ports[%d]: %v", i, j, err)
				continue
			}
			open[n] = true
		}
	}
	for _, name := range []string{"grpc", "http"} {
		n, err := containerPort(c, intstr.FromString(name))
		if err == nil && !open[n] {
			what := map[string]string{"grpc": "the gRPC port", "http": "the metrics port"}[name]
			fail("no ingress rule admits %s", what)
		}
	}
	return errs
}

func checkServiceMonitor(cb *chartBundle, sm *serviceMonitor) []error {
	var errs []error
	fail := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("ServiceMonitor %q: "+format, append([]any{sm.Name}, a...)...))
	}
	if !slices.Contains(sm.Spec.NamespaceSelector.MatchNames, chartNS) {
		fail("namespaceSelector does not include %q", chartNS)
	}
	var svc *corev1.Service
	for _, name := range sortedKeys(cb.services) {
		if selects(&sm.Spec.Selector, labels.Set(cb.services[name].Labels)) {
			svc = cb.services[name]
		}
	}
	if svc == nil {
		fail("selects no Service")
		return errs
	}
	_, httpPort, _, _ := splitAddr(cb.sidecarArgs["http-addr"])
	for _, ep := range sm.Spec.Endpoints {
		i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port })
		if i < 0 {
			fail("endpoint port %q is not a port of Service %q", ep.Port, svc.Name)
		} else if n, err := containerPort(cb.sidecar, svc.Spec.Ports[i].TargetPort); err != nil || int(n) != httpPort {
			fail("endpoint port %q does not reach --http-addr's port %d", ep.Port, httpPort)
		}
		if ep.Path != "/metrics" {
			fail("path %q, want /metrics", ep.Path)
		}
		interval, err1 := model.ParseDuration(ep.Interval)
		timeout, err2 := model.ParseDuration(ep.ScrapeTimeout)
		if err := errors.Join(err1, err2); err != nil {
			fail("%v", err)
		} else if timeout > interval {
			fail("scrapeTimeout %s is longer than interval %s", timeout, interval)
		}
	}
	return errs
}

// readmeBlock matches a fenced YAML block of the chart's README that
// follows a line holding marker.
func readmeBlock(readme, marker string) (string, error) {
	re := regexp.MustCompile("(?s)" + regexp.QuoteMeta(marker) + ".*?```yaml\n(.*?)```")
	m := re.FindStringSubmatch(readme)
	if m == nil {
		return "", fmt.Errorf("no ```yaml block after %q", marker)
	}
	return m[1], nil
}

// firstSet returns the first non-empty string.
func firstSet(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
