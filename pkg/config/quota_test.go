package config_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// TestQuotaModeAndMetadata: quota_mode marks a rule and its limits, and
// metadata keeps what envoyproxy/ratelimit turns into a
// google.protobuf.Struct: numbers as float64, a timestamp as the text it
// is written as (yaml.v2 does not resolve timestamps), other keys as
// their text.
func TestQuotaModeAndMetadata(t *testing.T) {
	const rules = `
domain: shop
descriptors:
  - key: model
    quota_mode: true
    rate_limits:
      - {unit: minute, requests_per_unit: 10}
      - {unit: hour, requests_per_unit: 100}
    metadata:
      team: search
      cost: 2
      ratio: 0.5
      on: true
      none: null
      since: 2024-01-02
      tags: [a, 1]
      nested: {1: one, deep: {x: y}}
  - key: plain
    quota_mode: false
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {}
`
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	model := rs.Match("shop", []limits.Entry{{Key: "model", Value: "m"}})
	if model == nil || !model.QuotaMode {
		t.Fatalf("model: rule %+v, want quota_mode", model)
	}
	for i, l := range model.Limits {
		if !l.Quota {
			t.Errorf("model: limit %d is not a quota limit", i)
		}
	}
	want := map[string]any{
		"team": "search", "cost": float64(2), "ratio": 0.5, "on": true, "none": nil,
		"since": "2024-01-02", "tags": []any{"a", float64(1)},
		"nested": map[string]any{"1": "one", "deep": map[string]any{"x": "y"}},
	}
	if diff := cmp.Diff(want, model.Metadata); diff != "" {
		t.Errorf("model: metadata (-want +got):\n%s", diff)
	}
	plain := rs.Match("shop", []limits.Entry{{Key: "plain", Value: "p"}})
	if plain.QuotaMode || plain.Limits[0].Quota || plain.Metadata != nil {
		t.Errorf("plain: quota_mode %v, limit quota %v, metadata %v; want false, false, nil", plain.QuotaMode, plain.Limits[0].Quota, plain.Metadata)
	}
}

// TestReferenceExamples: envoyproxy/ratelimit's example rule files load
// unchanged.
func TestReferenceExamples(t *testing.T) {
	rs, err := config.Load("testdata/envoyproxy", config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"mongo_cps", "rl", "test-domain"}, rs.Domains()); diff != "" {
		t.Errorf("domains (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		give  []limits.Entry
		quota bool
		meta  map[string]any
	}{
		{[]limits.Entry{{Key: "service", Value: "service_1"}}, true, map[string]any{"service_with_quota": map[string]any{"name": "service_1"}}},
		{[]limits.Entry{{Key: "foo", Value: "x"}}, false, nil},
	} {
		r := rs.Match("rl", tt.give)
		if r == nil || r.QuotaMode != tt.quota || !cmp.Equal(r.Metadata, tt.meta) {
			t.Errorf("rl %v: rule %+v, want quota_mode %v and metadata %v", tt.give, r, tt.quota, tt.meta)
		}
	}
	r := rs.Match("test-domain", []limits.Entry{{Key: "key1", Value: "value1"}, {Key: "subkey1", Value: "something"}})
	if r == nil || !cmp.Equal(r.Metadata, map[string]any{"name": "service_1"}) {
		t.Errorf("test-domain key1_value1.subkey1: rule %+v, want metadata name: service_1", r)
	}
}
