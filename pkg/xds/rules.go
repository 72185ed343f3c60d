package xds

import (
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
)

// The names of the first rule source beside Sources: the rule files, or
// the first xDS server. A Source may take neither.
const (
	FilesSource = "files"
	FirstSource = "xds"
)

// SourceOptions are the rule sources over xDS that the sidecar's flags
// ask for: the first server (--config-type xds, --xds-*), in place of the
// rule files, and more servers (--xds-source) beside it or them. Validate
// checks them and completes Options from the texts.
type SourceOptions struct {
	// ConfigType is file or xds (also grpc_xds_sotw, any case).
	ConfigType string
	// Options are the first server's: Server, NodeID, the backoff,
	// MaxMessageBytes, StartWithoutRules and OverlayPath as given;
	// NodeMetadata, Headers and TLS set by Validate from what follows.
	// The rules' fields and OnApply are the caller's to set.
	Options
	// NodeMetadata and Headers are ParseNodeMetadata's and
	// ParseHeaders' texts.
	NodeMetadata, Headers string
	// TLS secures the first server's connection with TLSFiles; any of
	// TLSFiles' fields implies it.
	TLS      bool
	TLSFiles TLSOptions
	// Sources are the more servers.
	Sources SourceList

	// Enabled is set by Validate: the first source is an xDS server.
	Enabled bool
}

// MinBackoffInitial is the shortest first reconnect wait Validate takes.
const MinBackoffInitial = 10 * time.Millisecond

// Validate checks o, sets Enabled, and parses the node metadata and the
// headers into o.Options, with the TLS files if TLS is on.
func (o *SourceOptions) Validate() error {
	switch strings.ToLower(o.ConfigType) {
	case "file":
	case "xds", "grpc_xds_sotw":
		o.Enabled = true
	default:
		return fmt.Errorf("--config-type: want file or xds, got %q", o.ConfigType)
	}
	if o.StartWithoutRules && !o.Enabled && len(o.Sources) == 0 {
		return fmt.Errorf("--force-start-without-rules: only with --config-type xds or --xds-source")
	}
	if err := o.Sources.check(); err != nil {
		return err
	}
	if o.OverlayPath != "" && !o.Enabled {
		return fmt.Errorf("--xds-overlay: only with --config-type xds (rule files say it all themselves)")
	}
	// A wait below MinBackoffInitial would let a client hammer a server
	// that refuses it. The mapping of XDS_CLIENT_BACKOFF_* keeps the
	// longest wait at least the first, and the jitter and message size
	// in range.
	if o.BackoffInitial < MinBackoffInitial {
		return fmt.Errorf("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: want %v or more, got %v", MinBackoffInitial, o.BackoffInitial)
	}
	f := o.TLSFiles
	o.TLS = o.TLS || f.CAFile != "" || f.CertFile != "" || f.KeyFile != "" || f.ServerName != ""
	o.Options.TLS = nil
	if o.TLS {
		o.Options.TLS = &f
	}
	var err error
	if o.Options.NodeMetadata, err = ParseNodeMetadata(o.NodeMetadata); err != nil {
		return fmt.Errorf("--xds-node-metadata: %w", err)
	}
	if o.Options.Headers, err = ParseHeaders(o.Headers); err != nil {
		return fmt.Errorf("--xds-headers: %w", err)
	}
	return nil
}

// SourceOptions returns the options of more server s, those of the first
// (o, validated, with the rules' fields and OnApply set) but for s's.
func (o Options) SourceOptions(s Source) Options {
	o.Server, o.NodeID, o.TLS = s.Server, s.NodeID, s.TLS
	o.NodeMetadata, o.Headers, o.OverlayPath = nil, nil, "" // the first server's alone
	o.StartWithoutRules = o.StartWithoutRules || s.ForceStart
	// A push of nothing empties this source's domains only, and is how
	// AI Gateway's controller says its last QuotaPolicy went: refusing
	// it would keep a deleted quota in force.
	o.AllowEmpty = true
	return o
}

// SourceList is --xds-source: repeatable, and one value may hold several
// separated by ';', as RLS_XDS_SOURCE does. It is a flag.Value.
type SourceList []Source

func (l *SourceList) String() string {
	if l == nil {
		return ""
	}
	texts := make([]string, len(*l))
	for i, s := range *l {
		texts[i] = s.String()
	}
	return strings.Join(texts, ";")
}

// Set adds the sources of s (ParseSources).
func (l *SourceList) Set(s string) error {
	more, err := ParseSources(s)
	if err != nil {
		return err
	}
	*l = append(*l, more...)
	return nil
}

// check refuses a name given twice, or that of the first source.
func (l SourceList) check() error {
	seen := map[string]bool{FilesSource: true, FirstSource: true}
	for _, s := range l {
		if seen[s.Name] {
			return fmt.Errorf("--xds-source: name %q: taken (%s and %s name the first source)", s.Name, FilesSource, FirstSource)
		}
		seen[s.Name] = true
	}
	return nil
}

// RuleSource is a Client as the sidecar's rule source: SIGHUP reads the
// overlay again, if there is one, and is otherwise ignored.
type RuleSource struct {
	*Client
	log *zap.Logger
}

// NewRuleSource returns the client of o as a rule source that logs to
// log, keeping target's rules its pushes'.
func NewRuleSource(target Target, log *zap.Logger, o Options) (*RuleSource, error) {
	c, err := New(target, log, o)
	if err != nil {
		return nil, err
	}
	return &RuleSource{Client: c, log: log}, nil
}

// Reload answers SIGHUP: the rules are the server's last push, and only
// the overlay, if any, is read again.
func (r *RuleSource) Reload() (bool, error) {
	if r.o.OverlayPath != "" {
		return r.ReloadOverlay()
	}
	r.log.Info("SIGHUP ignored: the rules come from the xDS server", zap.String("server", r.o.Server))
	return false, nil
}
