package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/alloctest"
)

// TestDebugConfigConcurrentGETs: 32 GETs of /debug/config at once, on a
// rule set of 20,000 rules, allocate about what one GET does. Each GET
// used to build and encode the whole rule tree: 40,000 rules and 32 GETs
// at once took the sidecar from 68 MB to 1.08 GB.
func TestDebugConfigConcurrentGETs(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("domain: edge\ndescriptors:\n")
	for i := range 20_000 {
		fmt.Fprintf(&b, "  - {key: user, value: u%d, rate_limit: {unit: second, requests_per_unit: 10}}\n", i)
	}
	write(t, filepath.Join(dir, "rules.yaml"), b.String())
	s := startSidecar(t, "--config", dir)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	defer client.CloseIdleConnections()
	fetch := func() {
		r, err := client.Get("http://" + s.httpAddr + "/debug/config")
		if err != nil {
			t.Error(err)
			return
		}
		defer r.Body.Close()
		if n, err := io.Copy(io.Discard, r.Body); err != nil || r.StatusCode != http.StatusOK || n < 1<<20 {
			t.Errorf("GET /debug/config: %d, %d bytes, %v", r.StatusCode, n, err)
		}
	}
	allocated := func(gets int) uint64 {
		return alloctest.Once(func() { alloctest.Concurrently(gets, fetch) })
	}
	first := allocated(1) // renders the page
	one := allocated(1)
	many := allocated(32)
	t.Logf("first GET: %d KiB; one more: %d KiB; 32 at once: %d KiB", first>>10, one>>10, many>>10)
	if many > first {
		t.Errorf("32 GETs at once allocated %d KiB, more than the first GET's %d KiB; want the page rendered once", many>>10, first>>10)
	}
}
