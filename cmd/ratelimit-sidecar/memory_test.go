package main

import (
	"io"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

func TestMemoryMaxKeysFlag(t *testing.T) {
	c, err := parseFlags(nil, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.store.memoryMaxKeys != memory.DefaultMaxKeys {
		t.Errorf("default --memory-max-keys = %d, want memory.DefaultMaxKeys %d", c.store.memoryMaxKeys, memory.DefaultMaxKeys)
	}
	env := map[string]string{"RLS_MEMORY_MAX_KEYS": "5000"}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if c, err = parseFlags(nil, getenv, io.Discard); err != nil || c.store.memoryMaxKeys != 5000 {
		t.Errorf("RLS_MEMORY_MAX_KEYS=5000: got %v, err %v", c, err)
	}
	// There is no unbounded memory store: 0 is a mistake, not "no cap".
	for _, give := range []string{"0", "-1"} {
		if _, err := parseFlags([]string{"--memory-max-keys", give}, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), "--memory-max-keys") {
			t.Errorf("--memory-max-keys %s: err = %v, want one naming --memory-max-keys", give, err)
		}
	}
}
