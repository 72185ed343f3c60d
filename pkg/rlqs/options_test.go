package rlqs_test

import (
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// TestValidate: Validate refuses the first tunable out of the range the
// sidecar's --rlqs-* flags allow, naming the flag, and takes the flags'
// defaults and the ends of each range.
func TestValidate(t *testing.T) {
	flags := rlqs.Options{BucketTTL: 6 * time.Second, Margin: time.Second, MaxBuckets: 10_000, IdleAfter: time.Minute}
	with := func(f func(o *rlqs.Options)) rlqs.Options {
		o := flags
		f(&o)
		return o
	}
	tests := []struct {
		name string
		give rlqs.Options
		want string // "" for none
	}{
		{"the flags' defaults", flags, ""},
		{"the ends of the ranges", with(func(o *rlqs.Options) {
			o.BucketTTL, o.Margin, o.MaxBuckets, o.IdleAfter = time.Second, 10*time.Millisecond, 1, time.Nanosecond
		}), ""},
		{"the longest margin", with(func(o *rlqs.Options) { o.Margin = time.Minute }), ""},
		{"a bucket ttl in part seconds", with(func(o *rlqs.Options) { o.BucketTTL = 1500 * time.Millisecond }),
			"--rlqs-bucket-ttl: want whole seconds, at least 1s (Envoy reads an assignment's time to live in whole seconds), got 1.5s"},
		{"no bucket ttl", with(func(o *rlqs.Options) { o.BucketTTL = 0 }),
			"--rlqs-bucket-ttl: want whole seconds, at least 1s (Envoy reads an assignment's time to live in whole seconds), got 0s"},
		{"a margin too short", with(func(o *rlqs.Options) { o.Margin = time.Millisecond }), "--rlqs-margin: want 10ms to 1m, got 1ms"},
		{"a margin too long", with(func(o *rlqs.Options) { o.Margin = time.Minute + 1 }), "--rlqs-margin: want 10ms to 1m, got 1m0.000000001s"},
		{"no buckets", with(func(o *rlqs.Options) { o.MaxBuckets = 0 }), "--rlqs-max-buckets: want 1 or more, got 0"},
		{"no idle time", with(func(o *rlqs.Options) { o.IdleAfter = 0 }), "--rlqs-idle-after: want more than 0, got 0s"},
		{"two wrong: the first is told", with(func(o *rlqs.Options) { o.MaxBuckets, o.Margin = -1, 0 }), "--rlqs-margin: want 10ms to 1m, got 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate() = %q, want %q", got, tt.want)
			}
		})
	}
}
