package limits_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// TestValidate: each bound of RequestLimits refuses a request with a
// *RequestError naming the field in Envoy's proto terms; a request
// within every bound passes.
func TestValidate(t *testing.T) {
	e := limits.NewEngine(limits.NewRuleset(nil, nil, ""), nil, limits.EngineOptions{Limits: limits.RequestLimits{
		MaxDescriptors: 2, MaxEntries: 2, MaxValueBytes: 8, MaxHits: 10,
	}})
	ent := func(k, v string) []limits.Entry { return []limits.Entry{{Key: k, Value: v}} }
	one := func(d limits.Descriptor) *limits.Request {
		return &limits.Request{Domain: "shop", Descriptors: []limits.Descriptor{d}}
	}
	long := strings.Repeat("x", 9)
	tests := []struct {
		name      string
		give      *limits.Request
		wantField string
	}{
		{"no domain", &limits.Request{Descriptors: []limits.Descriptor{{Entries: ent("k", "v")}}}, "domain"},
		{"long domain", &limits.Request{Domain: long, Descriptors: []limits.Descriptor{{Entries: ent("k", "v")}}}, "domain"},
		{"no descriptors", &limits.Request{Domain: "shop"}, "descriptors"},
		{"too many descriptors", &limits.Request{Domain: "shop", Descriptors: make([]limits.Descriptor, 3)}, "descriptors"},
		{"too many hits", &limits.Request{Domain: "shop", Hits: 11, Descriptors: []limits.Descriptor{{Entries: ent("k", "v")}}}, "hits_addend"},
		{"no entries", one(limits.Descriptor{}), "descriptors[0].entries"},
		{"too many entries", one(limits.Descriptor{Entries: append(ent("a", ""), append(ent("b", ""), ent("c", "")...)...)}), "descriptors[0].entries"},
		{"empty key", one(limits.Descriptor{Entries: ent("", "v")}), "descriptors[0].entries[0].key"},
		{"long key", one(limits.Descriptor{Entries: ent(long, "v")}), "descriptors[0].entries[0].key"},
		{"long value", one(limits.Descriptor{Entries: ent("k", long)}), "descriptors[0].entries[0].value"},
		{"descriptor hits", one(limits.Descriptor{Entries: ent("k", "v"), Hits: 11, HasHits: true}), "descriptors[0].hits_addend"},
		{"unknown unit", one(limits.Descriptor{Entries: ent("k", "v"), Override: &limits.Override{Requests: 1, Unit: 99}}), "descriptors[0].limit.unit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var re *limits.RequestError
			if err := e.Validate(tt.give); !errors.As(err, &re) || re.Field != tt.wantField {
				t.Errorf("Validate = %v, want a *RequestError on %s", err, tt.wantField)
			}
		})
	}
	t.Run("within bounds", func(t *testing.T) {
		req := &limits.Request{Domain: "shop", Hits: 10, Descriptors: []limits.Descriptor{
			{Entries: append(ent("k", "12345678"), ent("k2", "")...), Hits: 0, HasHits: true},
			{Entries: ent("12345678", "v"), Override: &limits.Override{Requests: 1, Unit: limits.UnitSecond}},
		}}
		if err := e.Validate(req); err != nil {
			t.Errorf("Validate = %v, want nil", err)
		}
	})
}
