package k8s_test

import (
	"slices"
	"strings"
	"testing"
)

// TestChartXDSSources: xds.sources become one --xds-source each, with the
// paths of their TLS Secret's keys where the Secret is mounted; pods wait
// for every server's rules unless xds.forceStartWithoutRules.
func TestChartXDSSources(t *testing.T) {
	ch := loadChart(t)
	r, err := renderChart(ch, map[string]any{"xds": map[string]any{
		"sources": []any{
			map[string]any{"name": "aigw", "server": "ai-gateway-controller.envoy-ai-gateway-system:18002", "nodeId": "envoy-ai-gateway-ratelimit", "forceStart": true},
			map[string]any{"name": "eg", "server": "envoy-gateway.envoy-gateway-system:18001", "nodeId": "envoy-ratelimit",
				"tls": map[string]any{"existingSecret": "envoy-rate-limit", "caKey": "ca.crt", "certKey": "tls.crt", "keyKey": "tls.key"}},
		},
		"forceStartWithoutRules": true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	spec := index(r.objs).deployments[0].Spec.Template.Spec
	c := spec.Containers[0]
	var got []string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--xds-source="); ok {
			got = append(got, v)
		}
	}
	want := []string{
		"name=aigw,server=ai-gateway-controller.envoy-ai-gateway-system:18002,node-id=envoy-ai-gateway-ratelimit,force-start=true",
		"name=eg,server=envoy-gateway.envoy-gateway-system:18001,node-id=envoy-ratelimit,tls=true," +
			"tls-ca=/etc/ratelimit-sidecar-tls/xds-eg/ca.crt,tls-cert=/etc/ratelimit-sidecar-tls/xds-eg/tls.crt,tls-key=/etc/ratelimit-sidecar-tls/xds-eg/tls.key",
	}
	if !slices.Equal(got, want) {
		t.Errorf("--xds-source args\n%q\nwant\n%q", got, want)
	}
	if !slices.Contains(c.Args, "--force-start-without-rules") {
		t.Errorf("args lack --force-start-without-rules: %q", c.Args)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || m.Name == "xds-tls-eg" && m.MountPath == "/etc/ratelimit-sidecar-tls/xds-eg" && m.ReadOnly
	}
	secret := false
	for _, v := range spec.Volumes {
		secret = secret || v.Name == "xds-tls-eg" && v.Secret != nil && v.Secret.SecretName == "envoy-rate-limit"
	}
	if !mounted || !secret {
		t.Errorf("the eg source's Secret: mounted %v, volume %v", mounted, secret)
	}

	// The defaults: no source, no flag.
	r, err = renderChart(ch, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range index(r.objs).deployments[0].Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--xds-source") || a == "--force-start-without-rules" {
			t.Errorf("default args hold %q", a)
		}
	}
}

// TestChartXDSSourcesRefused: a source without its node ID, or named as
// the rule files are, fails the install at its path.
func TestChartXDSSourcesRefused(t *testing.T) {
	ch := loadChart(t)
	for _, tt := range []struct {
		name string
		give map[string]any
		want string
	}{
		{"no node id", map[string]any{"name": "aigw", "server": "h:18002"}, "missing property 'nodeId'"},
		{"name of the files", map[string]any{"name": "files", "server": "h:1", "nodeId": "n"}, "/xds/sources/0/name"},
		{"comma in the server", map[string]any{"name": "a", "server": "h:1,node-id=x", "nodeId": "n"}, "/xds/sources/0/server"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := renderChart(ch, map[string]any{"xds": map[string]any{"sources": []any{tt.give}}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}
