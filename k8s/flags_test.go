package k8s_test

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// flagsDoc lists every flag of the sidecar, with its default, in
// tables whose rows start "| `--name` | default |" (or several names). A
// test in cmd/ratelimit-sidecar checks the page against the real flag
// set: every flag has a row, every row is a flag, and a bool flag's
// default, and only a bool flag's, reads false or true. This module
// cannot import the command, and building it to ask for -h takes a
// minute on a cold build cache, so the checked page is the list.
const flagsDoc = "../docs/flags.md"

var (
	flagsOnce sync.Once
	flagsSet  map[string]bool // name → is a bool flag
	flagsErr  error
)

// sidecarFlags returns the sidecar's flag names, and whether each is a
// bool flag (so may stand alone).
func sidecarFlags(t *testing.T) map[string]bool {
	t.Helper()
	flagsOnce.Do(func() { flagsSet, flagsErr = readFlags(flagsDoc) })
	if flagsErr != nil {
		t.Fatal(flagsErr)
	}
	return flagsSet
}

var (
	flagRow  = regexp.MustCompile("(?m)^\\| (`--[a-z0-9-]+`(?:, `--[a-z0-9-]+`)*) \\|([^|]*)\\|")
	flagName = regexp.MustCompile("`--([a-z0-9-]+)`")
)

func readFlags(path string) (map[string]bool, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	flags := map[string]bool{}
	for _, row := range flagRow.FindAllSubmatch(doc, -1) {
		def := strings.TrimSpace(string(row[2]))
		for _, n := range flagName.FindAllSubmatch(row[1], -1) {
			flags[string(n[1])] = def == "false" || def == "true"
		}
	}
	// Guard against reading nothing after a change of the page's shape.
	for _, want := range []string{"config", "grpc-addr", "http-addr", "redis-url", "version"} {
		if _, ok := flags[want]; !ok {
			return nil, fmt.Errorf("%s: found no flag %q (found %d flags); has the table's shape changed?", path, want, len(flags))
		}
	}
	return flags, nil
}

// parseArgs reads a command line of the sidecar's flags into name → value,
// as the flag package would: -name or --name, then =value, or the next
// argument unless the flag is a bool. A repeated flag keeps its last value.
func parseArgs(known map[string]bool, args []string) (map[string]string, error) {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return nil, fmt.Errorf("argument %q is not a flag", a)
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		isBool, ok := known[name]
		if !ok {
			return nil, fmt.Errorf("unknown flag --%s", name)
		}
		switch {
		case hasValue:
		case isBool:
			value = "true"
		case i+1 < len(args):
			i++
			value = args[i]
		default:
			return nil, fmt.Errorf("flag --%s needs a value", name)
		}
		out[name] = value
	}
	return out, nil
}

// splitAddr splits a listen address and reports whether only the same
// host (or pod) can reach it.
func splitAddr(addr string) (host string, port int, loopback bool, err error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, false, err
	}
	port, err = strconv.Atoi(p)
	if err != nil {
		return "", 0, false, fmt.Errorf("%s: port: %w", addr, err)
	}
	ip := net.ParseIP(h)
	return h, port, h == "localhost" || (ip != nil && ip.IsLoopback()), nil
}
