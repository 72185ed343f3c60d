package k8s_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// flagsFile defines the sidecar's flags, each with one call on its
// *flag.FlagSet, such as fs.StringVar(&c.configPath, "config", …).
const flagsFile = "../cmd/ratelimit-sidecar/flags.go"

var (
	flagsOnce sync.Once
	flagsSet  map[string]bool // name → is a bool flag
	flagsErr  error
)

// sidecarFlags returns the sidecar's flag names, read from the source of
// its flag set, and whether each is a bool flag (so may stand alone).
// Reading the source costs nothing, where building the binary to ask it
// for -h takes a minute on a cold build cache.
func sidecarFlags(t *testing.T) map[string]bool {
	t.Helper()
	flagsOnce.Do(func() { flagsSet, flagsErr = readFlags(flagsFile) })
	if flagsErr != nil {
		t.Fatal(flagsErr)
	}
	return flagsSet
}

func readFlags(path string) (map[string]bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		return nil, err
	}
	flags := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		// The name is the first argument of fs.String(…), fs.Func(…) and
		// the like, and the second of fs.StringVar(&v, …) and fs.Var(v, …).
		method := sel.Sel.Name
		i := 0
		if strings.HasSuffix(method, "Var") {
			i = 1
		}
		switch strings.TrimSuffix(method, "Var") {
		case "", "String", "Bool", "Int", "Int64", "Uint", "Uint64", "Float64", "Duration", "Func", "BoolFunc", "Text":
		default:
			return true
		}
		if len(call.Args) <= i {
			return true
		}
		lit, ok := call.Args[i].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		name, err := strconv.Unquote(lit.Value)
		if err != nil {
			return true
		}
		flags[name] = strings.HasPrefix(method, "Bool")
		return true
	})
	// Guard against reading nothing after a refactor of flags.go.
	for _, want := range []string{"config", "grpc-addr", "http-addr", "redis-url", "version"} {
		if _, ok := flags[want]; !ok {
			return nil, fmt.Errorf("%s: found no flag %q (found %d flags); has the way flags are defined changed?", path, want, len(flags))
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
