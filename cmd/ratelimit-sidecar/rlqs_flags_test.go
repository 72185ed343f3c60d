package main

import (
	"io"
	"strings"
	"testing"
)

func TestRLQSFlagsInvalid(t *testing.T) {
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"--rlqs-bucket-ttl", "1500ms"}, "--rlqs-bucket-ttl 1.5s: must be whole seconds, at least 1s"},
		{[]string{"--rlqs-bucket-ttl", "0s"}, "--rlqs-bucket-ttl 0s: must be whole seconds, at least 1s"},
		{[]string{"--rlqs-idle-after", "0s"}, "--rlqs-idle-after 0s: must be above 0"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.give, " "), func(t *testing.T) {
			if _, err := parseFlags(tt.give, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one with %q", err, tt.want)
			}
		})
	}
	c, err := parseFlags([]string{"--rlqs-bucket-ttl", "7s"}, noEnv, io.Discard)
	if err != nil {
		t.Fatalf("--rlqs-bucket-ttl 7s: %v", err)
	}
	if c.rlqsBucketTTL.Seconds() != 7 {
		t.Errorf("--rlqs-bucket-ttl 7s read as %s", c.rlqsBucketTTL)
	}
}
