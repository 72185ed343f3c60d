package xds_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

// sourceOptions are the options the sidecar's flags give by default, as
// changed by set.
func sourceOptions(set func(*xds.SourceOptions)) *xds.SourceOptions {
	o := &xds.SourceOptions{ConfigType: "file", Options: xds.Options{Server: "localhost:18000", NodeID: "default", BackoffInitial: xds.DefaultBackoffInitial}}
	set(o)
	return o
}

// mustSources parses --xds-source texts, or panics.
func mustSources(texts ...string) xds.SourceList {
	var l xds.SourceList
	for _, s := range texts {
		if err := l.Set(s); err != nil {
			panic(err)
		}
	}
	return l
}

// TestSourceOptionsRefused: bad xDS options are refused, each naming its
// flag and what is wrong.
func TestSourceOptionsRefused(t *testing.T) {
	tests := []struct {
		give func(*xds.SourceOptions)
		want string
	}{
		{func(o *xds.SourceOptions) { o.ConfigType = "consul" }, `--config-type: want file or xds, got "consul"`},
		{func(o *xds.SourceOptions) { o.StartWithoutRules = true }, "--force-start-without-rules: only with --config-type xds or --xds-source"},
		{func(o *xds.SourceOptions) { o.OverlayPath = "overlay.yaml" }, "--xds-overlay: only with --config-type xds"},
		{func(o *xds.SourceOptions) { o.NodeMetadata = "cluster" }, `--xds-node-metadata: want key=value, got "cluster"`},
		{func(o *xds.SourceOptions) { o.NodeMetadata = "{cluster" }, "--xds-node-metadata: want a JSON object"},
		{func(o *xds.SourceOptions) { o.Headers = "x-token=abc" }, `--xds-headers: want name:value, got "x-token=abc"`},
		{func(o *xds.SourceOptions) { o.Headers = "grpc-timeout:1s" }, "--xds-headers: grpc-timeout: names that start with grpc- are gRPC's own"},
		{func(o *xds.SourceOptions) { o.Headers = "x token:abc" }, `--xds-headers: "x token": a header name holds only`},
		{func(o *xds.SourceOptions) { o.BackoffInitial = 5 * xds.MinBackoffInitial / 10 }, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: want 10ms or more, got 5ms"},
		{func(o *xds.SourceOptions) { o.Sources = mustSources("name=files,server=h:1,node-id=n") }, `--xds-source: name "files": taken (files and xds name the first source)`},
		{func(o *xds.SourceOptions) { o.Sources = mustSources("name=xds,server=h:1,node-id=n") }, `--xds-source: name "xds": taken`},
		{func(o *xds.SourceOptions) {
			o.Sources = mustSources("name=a,server=h:1,node-id=n;name=a,server=h:2,node-id=m")
		}, `name "a": taken`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if err := sourceOptions(tt.give).Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestSourceListRefused: a bad --xds-source text is refused as it is set.
func TestSourceListRefused(t *testing.T) {
	var l xds.SourceList
	if err := l.Set("name=aigw,server=h:18002"); err == nil || !strings.Contains(err.Error(), "node-id: required") {
		t.Errorf("Set without a node ID: %v, want node-id: required", err)
	}
}

// TestSourceOptionsValidate: Validate turns xDS on for xds and
// grpc_xds_sotw in any case, takes any TLS file as TLS, and parses the
// node metadata (key=value or JSON) and headers into Options.
func TestSourceOptionsValidate(t *testing.T) {
	o := sourceOptions(func(o *xds.SourceOptions) {
		o.ConfigType, o.TLSFiles.CAFile = "GRPC_XDS_SOTW", "/certs/ca.crt"
		o.NodeMetadata, o.Headers = "zone=a, rack = 7", "X-Token:abc:def"
		o.StartWithoutRules, o.OverlayPath = true, "overlay.yaml"
	})
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if !o.Enabled || !o.TLS || o.Options.TLS == nil || o.Options.TLS.CAFile != "/certs/ca.crt" {
		t.Errorf("enabled %v, TLS %v, TLS options %+v; want on, with the CA", o.Enabled, o.TLS, o.Options.TLS)
	}
	if f := o.Options.NodeMetadata.GetFields(); len(f) != 2 || f["zone"].GetStringValue() != "a" || f["rack"].GetStringValue() != "7" {
		t.Errorf("node metadata %v", o.Options.NodeMetadata)
	}
	if h := o.Options.Headers; len(h) != 1 || h["x-token"] != "abc:def" {
		t.Errorf("headers %v", h)
	}
	// A JSON object, as the reference's CONFIG_GRPC_XDS_NODE_METADATA
	// reaches it (internal/refenv), is read exactly: nothing trimmed.
	exact := sourceOptions(func(o *xds.SourceOptions) { o.NodeMetadata = `{"rule":" a=b ","{x":"1"}` })
	if err := exact.Validate(); err != nil {
		t.Fatal(err)
	}
	if got, want := exact.Options.NodeMetadata.AsMap(), map[string]any{"rule": " a=b ", "{x": "1"}; !maps.Equal(got, want) {
		t.Errorf("node metadata from JSON %v, want %v", got, want)
	}
	plain := sourceOptions(func(o *xds.SourceOptions) {
		o.Sources = mustSources("name=aigw,server=h:1,node-id=n", "name=b,server=h:2,node-id=m")
	})
	if err := plain.Validate(); err != nil || plain.Enabled || plain.Options.TLS != nil {
		t.Errorf("rule files and two sources: %v, enabled %v, TLS %v; want valid, files, plaintext", err, plain.Enabled, plain.Options.TLS)
	}
	if got := plain.Sources.String(); got != "name=aigw,server=h:1,node-id=n;name=b,server=h:2,node-id=m" {
		t.Errorf("Sources.String() = %q", got)
	}
}

// TestOptionsSourceOptions: a more server's options are the first's but
// for its server, node ID and TLS, without the first's node metadata,
// headers and overlay, and accept a push of nothing.
func TestOptionsSourceOptions(t *testing.T) {
	first := xds.Options{Server: "eg:18001", NodeID: "envoy-ratelimit", Headers: map[string]string{"x": "y"}, OverlayPath: "o.yaml",
		TLS: &xds.TLSOptions{CAFile: "ca"}, BackoffMax: 7, MaxMessageBytes: 9}
	got := first.SourceOptions(xds.Source{Name: "aigw", Server: "aigw:18002", NodeID: "n", ForceStart: true})
	if got.Server != "aigw:18002" || got.NodeID != "n" || got.TLS != nil || got.Headers != nil || got.OverlayPath != "" {
		t.Errorf("source options %+v: want its own server, node ID and TLS, and none of the first's headers or overlay", got)
	}
	if !got.AllowEmpty || !got.StartWithoutRules || got.BackoffMax != 7 || got.MaxMessageBytes != 9 {
		t.Errorf("source options %+v: want empty pushes allowed, its force start, and the first's backoff and bound", got)
	}
}
