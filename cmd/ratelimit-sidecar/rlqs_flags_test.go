package main

import (
	"io"
	"strings"
	"testing"
)

// TestRLQSBucketTTLWholeSeconds: a whole number of seconds is taken as
// it is (TestFlagsInvalid has the values refused).
func TestRLQSBucketTTLWholeSeconds(t *testing.T) {
	c, err := parseFlags([]string{"--rlqs-bucket-ttl", "7s"}, noEnv, io.Discard)
	if err != nil {
		t.Fatalf("--rlqs-bucket-ttl 7s: %v", err)
	}
	if c.rlqs.BucketTTL.Seconds() != 7 {
		t.Errorf("--rlqs-bucket-ttl 7s read as %s", c.rlqs.BucketTTL)
	}
}

// TestCheckRLQS: check --rlqs lists, after the rules, the rules whose
// buckets RLQS answers by the failure mode, with where and why.
func TestCheckRLQS(t *testing.T) {
	var stdout, stderr strings.Builder
	if err := runCheck([]string{"--config", "testdata/good", "--rlqs"}, &stdout, &stderr); err != nil {
		t.Fatalf("check: %v\n%s", err, stderr.String())
	}
	want := `ok: 2 domains, 9 rules, 9 limits in 2 files
rlqs: 3 rules not served from their limits
  testdata/good/rules.yaml:5 descriptors[0]: window 1s is too short for Envoy's whole-second assignments
  testdata/good/rules.yaml:15 descriptors[1].descriptors[0]: 2 limits apply; RLQS serves one limit per bucket
  testdata/good/rules.yaml:26 descriptors[3]: algorithm sliding_log cannot be served exactly over RLQS
`
	if !strings.HasSuffix(stdout.String(), want) {
		t.Errorf("check --rlqs printed:\n%s\nwant it to end with:\n%s", stdout.String(), want)
	}
	stdout.Reset()
	if err := runCheck([]string{"--config", "testdata/good"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout.String(), "rlqs") {
		t.Errorf("check without --rlqs printed RLQS lines:\n%s", stdout.String())
	}
}
