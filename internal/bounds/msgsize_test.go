package bounds

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// report returns an RLQS report of n buckets whose ids have k entries,
// each value of size bytes, on the wire.
func report(t testing.TB, n, k, size int) mem.BufferSlice {
	t.Helper()
	r := &rlqspb.RateLimitQuotaUsageReports{Domain: "edge"}
	for i := range n {
		id := make(map[string]string, k)
		for j := range k {
			id[fmt.Sprintf("k%d", j)] = fmt.Sprintf("%0*d", size, i)
		}
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqspb.BucketId{Bucket: id}, NumRequestsAllowed: 1})
	}
	b, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestReportIDsRefusedBeforeDecoding: an RLQS report whose bucket ids
// hold more than the bounds admit is refused before it is decoded, for
// about what its walk costs. Issue 37 decoded one bucket of 2,000,000
// entries (16 MB) to 268 MB and 50,000 buckets of 32 entries (13.2 MB)
// to 174 MB: these are the same shapes, scaled down, which the codec
// decoded before it counted entries (4.5 MB and 2.6 MB here).
func TestReportIDsRefusedBeforeDecoding(t *testing.T) {
	c := NewCodec(IDBounds{})
	tests := []struct {
		name string
		give mem.BufferSlice
		want string
	}{
		{"one id of 100,000 entries", report(t, 1, 100_000, 8), "more than 128 entries"},
		{"10,000 ids of 32 entries", report(t, 10_000, 32, 1), "more than 100000 bucket id entries"},
		{"a value past 4 times 4096 bytes", report(t, 1, 1, 20000), "20000 bytes, more than 16384"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			n := allocated(func() { err = c.Unmarshal(tt.give, &rlqspb.RateLimitQuotaUsageReports{}) })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Unmarshal: %v, want an error containing %q", err, tt.want)
			}
			// The walk allocates its copy of the message when it is in
			// more than one buffer, and nothing per field.
			if n > uint64(tt.give.Len())+64<<10 {
				t.Errorf("refusing a %d-byte report allocated %d bytes", tt.give.Len(), n)
			}
		})
	}
}

// TestReportWithinBoundsDecodes: the largest reports within every bound
// are decoded, and to about what docs/bounds.md says they cost.
func TestReportWithinBoundsDecodes(t *testing.T) {
	c := NewCodec(IDBounds{})
	tests := []struct {
		name     string
		give     mem.BufferSlice
		wantMost uint64 // bytes allocated
	}{
		{"50,000 ids of 2 entries", report(t, RLQSMaxReportBuckets, 2, 8), 40 << 20},
		{"3,125 ids of 32 entries", report(t, RLQSMaxReportEntries/32, 32, 8), 24 << 20},
		{"one id of 32 values of 4096 bytes", report(t, 1, 32, 4096), 1 << 20},
		// Past the RLS bounds, within IDSlack: pkg/rlqs answers the bucket.
		{"one id of 128 values of 16384 bytes", report(t, 1, 128, 16384), 8 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &rlqspb.RateLimitQuotaUsageReports{}
			var err error
			n := allocated(func() { err = c.Unmarshal(tt.give, r) })
			if err != nil {
				t.Fatal(err)
			}
			if n > tt.wantMost {
				t.Errorf("decoding a %d-byte report allocated %d bytes, want at most %d", tt.give.Len(), n, tt.wantMost)
			}
			t.Logf("%d bytes on the wire, %d allocated", tt.give.Len(), n)
		})
	}
}

// TestIDBoundsFollowFlags: raised RLS bounds raise the ids' bounds.
func TestIDBoundsFollowFlags(t *testing.T) {
	c := NewCodec(IDBounds{Entries: 160, EntryBytes: 8192})
	if err := c.Unmarshal(report(t, 1, 600, 30000), &rlqspb.RateLimitQuotaUsageReports{}); err != nil {
		t.Errorf("an id of 600 entries of 30000 bytes under bounds of 160 and 8192: %v", err)
	}
}
