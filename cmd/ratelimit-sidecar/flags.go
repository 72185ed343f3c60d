package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// config is every flag's value.
type config struct {
	configPath      string
	grpcAddr        string
	httpAddr        string
	logLevel        string
	logFormat       string
	mergeDomains    bool
	drainDelay      time.Duration
	shutdownTimeout time.Duration
	request         limits.RequestLimits
	version         bool

	// onReady, if set, is called with the listeners' addresses once the
	// servers are about to serve. Tests use it to find ports chosen by :0.
	onReady func(grpcAddr, httpAddr string)
}

// parseFlags parses args, taking a flag's default from the environment
// variable RLS_<FLAG> (upper case, '-' as '_') when it is set.
func parseFlags(args []string, getenv func(string) (string, bool), stderr io.Writer) (*config, error) {
	c := &config{request: limits.DefaultRequestLimits}
	fs := flag.NewFlagSet("ratelimit-sidecar", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.configPath, "config", "config/", "rule file or directory of *.yaml/*.yml rule files")
	fs.StringVar(&c.grpcAddr, "grpc-addr", "127.0.0.1:8081", "address for the RLS gRPC service, health and reflection")
	fs.StringVar(&c.httpAddr, "http-addr", "127.0.0.1:8080", "address for /healthz and /readyz")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "json", "json or console")
	fs.BoolVar(&c.mergeDomains, "merge-domains", false, "let several rule files add to one domain")
	fs.DurationVar(&c.drainDelay, "drain-delay", 0, "on SIGTERM, how long to report NOT_SERVING before stopping, so Envoy and Kubernetes stop sending")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long in-flight requests may take to finish at shutdown")
	fs.IntVar(&c.request.MaxDescriptors, "max-descriptors", c.request.MaxDescriptors, "most descriptors in one request")
	fs.IntVar(&c.request.MaxEntries, "max-entries", c.request.MaxEntries, "most entries in one descriptor")
	fs.IntVar(&c.request.MaxValueBytes, "max-value-bytes", c.request.MaxValueBytes, "longest domain, entry key or entry value, in bytes")
	fs.Uint64Var(&c.request.MaxHits, "max-hits-addend", c.request.MaxHits, "largest hits_addend accepted")
	fs.BoolVar(&c.version, "version", false, "print the version and exit")

	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "RLS_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := getenv(name); ok && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s: %w", name, err)
			}
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch c.logFormat {
	case "json", "console":
	default:
		return nil, fmt.Errorf("--log-format: want json or console, got %q", c.logFormat)
	}
	if c.request.MaxDescriptors < 1 || c.request.MaxEntries < 1 || c.request.MaxValueBytes < 1 || c.request.MaxHits < 1 {
		return nil, fmt.Errorf("--max-descriptors, --max-entries, --max-value-bytes and --max-hits-addend must be at least 1")
	}
	return c, nil
}
