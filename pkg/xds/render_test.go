package xds_test

import (
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

// parsePush renders configs as a push and parses them as the client does.
func parsePush(t *testing.T, opts config.Options, configs ...*rlsconf.RateLimitConfig) (*limits.Ruleset, error) {
	t.Helper()
	var res []*anypb.Any
	for _, c := range configs {
		a, err := anypb.New(c)
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, a)
	}
	files, err := xds.Render(res)
	if err != nil {
		return nil, err
	}
	return config.ParseGenerated(files, opts)
}

func policy(unit rlsconf.RateLimitUnit, n uint32) *rlsconf.RateLimitPolicy {
	return &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}
}

func edge(ds ...*rlsconf.RateLimitDescriptor) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: ds}
}

// withUnknown returns m with an unknown field num holding a varint v,
// as a newer RateLimitConfig's field reaches a client built with
// go-control-plane's ratelimit module v0.1.0.
func withUnknown[M proto.Message](m M, num protowire.Number, v uint64) M {
	b := protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
	m.ProtoReflect().SetUnknown(b)
	return m
}

// withBytes returns m with an unknown field num holding bytes b.
func withBytes[M proto.Message](m M, num protowire.Number, b []byte) M {
	m.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b))
	return m
}

// TestRenderQuotaAndMetadata: quota_mode and metadata, which a newer
// RateLimitConfig has and go-control-plane's ratelimit module v0.1.0
// lacks, arrive as unknown fields and mean what they mean in rule files.
func TestRenderQuotaAndMetadata(t *testing.T) {
	rs, err := parsePush(t, config.Options{}, edge(
		withMetadata(withUnknown(&rlsconf.RateLimitDescriptor{Key: "user", RateLimit: policy(rlsconf.RateLimitUnit_MINUTE, 1)}, 7, 1)),
		&rlsconf.RateLimitDescriptor{Key: "plain", RateLimit: policy(rlsconf.RateLimitUnit_MINUTE, 1)},
	))
	if err != nil {
		t.Fatal(err)
	}
	user := rs.Match("edge", []limits.Entry{{Key: "user", Value: "u"}})
	if user == nil || !user.QuotaMode || !user.Limits[0].Quota || !cmp.Equal(user.Metadata, map[string]any{"team": "payments"}) {
		t.Errorf("user: rule %+v, want quota_mode and metadata team: payments", user)
	}
	plain := rs.Match("edge", []limits.Entry{{Key: "plain", Value: "p"}})
	if plain == nil || plain.QuotaMode || plain.Metadata != nil {
		t.Errorf("plain: rule %+v, want neither quota_mode nor metadata", plain)
	}
}

func withMetadata(d *rlsconf.RateLimitDescriptor) *rlsconf.RateLimitDescriptor {
	s, err := structpb.NewStruct(map[string]any{"team": "payments"})
	if err != nil {
		panic(err)
	}
	b, err := proto.Marshal(s)
	if err != nil {
		panic(err)
	}
	d.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(d.ProtoReflect().GetUnknown(), 8, protowire.BytesType), b))
	return d
}

// TestRenderGood: what a good push means, field by field, including the
// units that go-control-plane's ratelimit module v0.1.0 has no names for.
func TestRenderGood(t *testing.T) {
	rs, err := parsePush(t, config.Options{}, edge(
		&rlsconf.RateLimitDescriptor{Key: "week", RateLimit: policy(7, 70)},
		&rlsconf.RateLimitDescriptor{Key: "month", RateLimit: policy(5, 50)},
		&rlsconf.RateLimitDescriptor{Key: "year", RateLimit: policy(6, 60)},
		&rlsconf.RateLimitDescriptor{Key: "free", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
		&rlsconf.RateLimitDescriptor{Key: "tenant", Value: "acme", ShadowMode: true, DetailedMetric: true, Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "user", Value: "u*", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 3, Name: "per-user",
				Replaces: []*rlsconf.RateLimitReplace{{Name: "base"}}}},
		}},
	))
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]*limits.Rule{}
	for _, r := range rs.Rules("edge") {
		byKey[r.Key] = r
	}
	for key, want := range map[string]limits.Unit{"week": limits.UnitWeek, "month": limits.UnitMonth, "year": limits.UnitYear} {
		if r := byKey[key]; r == nil || len(r.Limits) != 1 || r.Limits[0].Unit != want {
			t.Errorf("%s: rule %+v, want one limit per %v", key, r, want)
		}
	}
	if !byKey["free"].Unlimited() {
		t.Errorf("free is not unlimited")
	}
	tenant := byKey["tenant"]
	if tenant == nil || tenant.Value != "acme" || !tenant.ShadowMode || !tenant.DetailedMetric || len(tenant.Children) != 1 {
		t.Fatalf("tenant = %+v", tenant)
	}
	u := tenant.Children[0]
	if u.Value != "u*" || u.Limits[0].Requests != 3 || u.Limits[0].Unit != limits.UnitSecond || u.Limits[0].Name != "per-user" || u.Limits[0].Replaces[0] != "base" {
		t.Errorf("tenant.user = %+v, limit %+v", u, u.Limits[0])
	}
	if u.Line != 0 || u.File != `RateLimitConfig "edge"` || u.Path != "descriptors[4].descriptors[0]" {
		t.Errorf("tenant.user comes from %s:%d %s, want RateLimitConfig \"edge\", no line, descriptors[4].descriptors[0]", u.File, u.Line, u.Path)
	}
}

// TestRenderOrder: a snapshot cache sends resources in map order; the
// rules, and their checksum, must not depend on it.
func TestRenderOrder(t *testing.T) {
	a := &rlsconf.RateLimitConfig{Name: "a", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "user", Value: "a*", RateLimit: policy(1, 1)}}}
	b := &rlsconf.RateLimitConfig{Name: "b", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "user", Value: "*", RateLimit: policy(1, 2)}}}
	merge := config.Options{MergeDomains: true}
	ab, err := parsePush(t, merge, a, b)
	if err != nil {
		t.Fatal(err)
	}
	ba, err := parsePush(t, merge, b, a)
	if err != nil {
		t.Fatal(err)
	}
	if ab.Checksum != ba.Checksum {
		t.Errorf("checksum depends on the resources' order: %s and %s", ab.Checksum, ba.Checksum)
	}
	if got := ba.Rules("edge")[0].Value; got != "a*" {
		t.Errorf("pushed b, a: the first wildcard is %q, want a's \"a*\" (resources sorted by name)", got)
	}
}

// TestRenderBad: a bad push is refused with every problem, each naming
// the resource, the path of the field and the reason, and no line.
func TestRenderBad(t *testing.T) {
	tests := []struct {
		name string
		give []*rlsconf.RateLimitConfig
		opts config.Options
		want []string
	}{
		{name: "unknown unit number", give: []*rlsconf.RateLimitConfig{edge(&rlsconf.RateLimitDescriptor{Key: "user", RateLimit: policy(42, 1)})},
			want: []string{`RateLimitConfig "edge": descriptors[0].rate_limit.unit: unknown unit "42"`}},
		{name: "no unit", give: []*rlsconf.RateLimitConfig{edge(&rlsconf.RateLimitDescriptor{Key: "user", RateLimit: policy(rlsconf.RateLimitUnit_UNKNOWN, 1)})},
			want: []string{`RateLimitConfig "edge": descriptors[0].rate_limit.unit: required`}},
		{name: "unlimited with a unit", give: []*rlsconf.RateLimitConfig{edge(&rlsconf.RateLimitDescriptor{Key: "user", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true, Unit: rlsconf.RateLimitUnit_SECOND}})},
			want: []string{`RateLimitConfig "edge": descriptors[0].rate_limit.unit: must not be set when unlimited is true`}},
		{name: "duplicate key", give: []*rlsconf.RateLimitConfig{edge(
			&rlsconf.RateLimitDescriptor{Key: "user", RateLimit: policy(1, 1)},
			&rlsconf.RateLimitDescriptor{Key: "user", RateLimit: policy(1, 2)},
		)}, want: []string{`RateLimitConfig "edge": descriptors[1]: duplicate descriptor key "user" value ""`}},
		{name: "empty key and domain", give: []*rlsconf.RateLimitConfig{{Name: "x", Descriptors: []*rlsconf.RateLimitDescriptor{{RateLimit: policy(1, 1)}}}},
			want: []string{`RateLimitConfig "x": domain: required and must not be empty`}},
		{name: "domain twice without merging", give: []*rlsconf.RateLimitConfig{
			{Name: "a", Domain: "edge"}, {Name: "b", Domain: "edge"},
		}, want: []string{`RateLimitConfig "b": domain: domain "edge" is already defined in RateLimitConfig "a"`}},
		{name: "quota_mode not a varint", give: []*rlsconf.RateLimitConfig{edge(withBytes(&rlsconf.RateLimitDescriptor{Key: "user", RateLimit: policy(1, 1)}, 7, []byte("yes")))},
			want: []string{`RateLimitConfig "edge": descriptors[0].quota_mode: want a bool`}},
		{name: "metadata not a Struct", give: []*rlsconf.RateLimitConfig{edge(withUnknown(&rlsconf.RateLimitDescriptor{Key: "user", RateLimit: policy(1, 1)}, 8, 1))},
			want: []string{`RateLimitConfig "edge": descriptors[0].metadata: want a google.protobuf.Struct`}},
		{name: "a field no RateLimitConfig has yet", give: []*rlsconf.RateLimitConfig{edge(&rlsconf.RateLimitDescriptor{Key: "user", RateLimit: withUnknown(policy(1, 1), 9, 1)})},
			want: []string{`RateLimitConfig "edge": descriptors[0].rate_limit: field number 9 of RateLimitPolicy is unknown to ratelimit-sidecar`}},
		{name: "every problem", give: []*rlsconf.RateLimitConfig{
			edge(&rlsconf.RateLimitDescriptor{Key: "user", RateLimit: policy(42, 1)}),
			{Name: "other", Domain: "other", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: policy(0, 1)}}},
		}, want: []string{`RateLimitConfig "edge": descriptors[0].rate_limit.unit: unknown unit "42"`, `RateLimitConfig "other": descriptors[0].rate_limit.unit: required`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := parsePush(t, tt.opts, tt.give...)
			if err == nil {
				t.Fatalf("accepted, with domains %q", rs.Domains())
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\nlacks %q", err, w)
				}
			}
			if got := len(config.Problems(err)); got != len(tt.want) {
				t.Errorf("%d problems, want %d:\n%v", got, len(tt.want), err)
			}
		})
	}
}

// TestRenderMetadataValues: every kind of google.protobuf.Struct value
// in a pushed descriptor's metadata means what it means in a rule file's.
func TestRenderMetadataValues(t *testing.T) {
	want := map[string]any{
		"int": 5.0, "float": 1.5, "big": 1e21, "str": "007", "yes": true, "none": nil,
		"list":   []any{"a", 2.0, false},
		"nested": map[string]any{"deeper": map[string]any{"x": "y"}},
	}
	s, err := structpb.NewStruct(want)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	d := withBytes(&rlsconf.RateLimitDescriptor{Key: "user", RateLimit: policy(rlsconf.RateLimitUnit_MINUTE, 1)}, 8, b)
	rs, err := parsePush(t, config.Options{}, edge(d))
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.Rules("edge")[0].Metadata; !cmp.Equal(got, want) {
		t.Errorf("metadata: %s", cmp.Diff(want, got))
	}
}
