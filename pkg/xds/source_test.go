package xds_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

// TestParseSources: the text of --xds-source gives each server its name,
// address, node ID and TLS; several are separated by ';'.
func TestParseSources(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []xds.Source
	}{
		{"ai gateway", "name=aigw,server=ai-gateway-controller.envoy-ai-gateway-system:18002,node-id=envoy-ai-gateway-ratelimit",
			[]xds.Source{{Name: "aigw", Server: "ai-gateway-controller.envoy-ai-gateway-system:18002", NodeID: "envoy-ai-gateway-ratelimit"}}},
		{"tls keys imply tls", " name=a , server=h:1, node-id=n, tls-ca=/c/ca.crt,tls-cert=/c/tls.crt,tls-key=/c/tls.key,tls-server-name=x ",
			[]xds.Source{{Name: "a", Server: "h:1", NodeID: "n", TLS: &xds.TLSOptions{CAFile: "/c/ca.crt", CertFile: "/c/tls.crt", KeyFile: "/c/tls.key", ServerName: "x"}}}},
		{"tls alone", "name=a,server=h:1,node-id=n,tls=true", []xds.Source{{Name: "a", Server: "h:1", NodeID: "n", TLS: &xds.TLSOptions{}}}},
		{"tls off", "name=a,server=h:1,node-id=n,tls=false", []xds.Source{{Name: "a", Server: "h:1", NodeID: "n"}}},
		{"force start", "name=a,server=h:1,node-id=n,force-start=true", []xds.Source{{Name: "a", Server: "h:1", NodeID: "n", ForceStart: true}}},
		{"two", "name=a,server=h:1,node-id=n;name=b,server=h:2,node-id=m;",
			[]xds.Source{{Name: "a", Server: "h:1", NodeID: "n"}, {Name: "b", Server: "h:2", NodeID: "m"}}},
		{"blank", " ; ", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := xds.ParseSources(tt.give)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			for i, s := range got {
				back, err := xds.ParseSources(s.String())
				if err != nil || !cmp.Equal(back, got[i:i+1]) {
					t.Errorf("String %q reads back as %v, %v", s.String(), back, err)
				}
			}
		})
	}
}

// TestParseSourcesInvalid: each mistake is refused with the entry and
// the key at fault.
func TestParseSourcesInvalid(t *testing.T) {
	tests := []struct {
		give, want string
	}{
		{"server=h:1,node-id=n", `name: want a-z`},
		{"name=AI,server=h:1,node-id=n", `name: want a-z`},
		{"name=a,node-id=n", "server: required"},
		{"name=a,server=h:1", "node-id: required"},
		{"name=a,server=h:1,node-id=n,port=2", `unknown key "port"`},
		{"name=a,server=h:1,node-id=n,name=b", "name: set twice"},
		{"name=a,server=h:1,node-id=n,tls=yes please", "tls: want true or false"},
		{"name=a,server=h:1,node-id=n,force-start=1x", "force-start: want true or false"},
		{"name=a,server=h:1,node-id=n,tls-cert=c", "tls-cert and tls-key: both or neither"},
		{"name=a,server", `want key=value, got "server"`},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			_, err := xds.ParseSources("name=ok,server=h:1,node-id=n;" + tt.give)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.give) {
				t.Errorf("error %v, want one naming %q and saying %q", err, tt.give, tt.want)
			}
		})
	}
}
