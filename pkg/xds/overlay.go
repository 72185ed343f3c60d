package xds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"slices"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// An overlay (Options.OverlayPath) is applied to every push's rendered
// rule documents before they are parsed, so a push, an overlay edit and
// `check`'s preview take one path (prepare, then parse) and the result
// passes the checks a rule file does.
//
// An overlay entry that matches nothing in a push does not make the push
// fail: the control plane's rules and the overlay change independently
// (a route removed in Envoy Gateway, a ConfigMap synced a minute after
// the policy it goes with), and NACKing every later push for a stale
// entry would freeze every rule. Such entries are logged at Warn when
// they change and counted in State.OverlayUnmatched; `check` refuses
// them.

// prepared is a push rendered, with the overlay applied.
type prepared struct {
	files    []config.File
	overlaid *config.Overlaid
	// key identifies the push with the overlay: the documents' checksum,
	// or the render error.
	key string
	err error // the render error
}

// prepare renders resources and applies ov (nil: none) to them.
func prepare(resources []*anypb.Any, ov *config.Overlay) prepared {
	files, err := render(resources)
	if err != nil {
		return prepared{key: "render: " + err.Error(), err: err, overlaid: ov.Apply(nil)}
	}
	a := ov.Apply(files)
	return prepared{files: a.Files, overlaid: a, key: config.Checksum(a.Files)}
}

// parse checks the prepared documents as rule files are checked; a
// problem in what the overlay set names the overlay's entry.
func (p prepared) parse(opts config.Options) (*limits.Ruleset, error) {
	rs, err := config.ParseGenerated(p.files, opts)
	return rs, p.overlaid.Blame(err)
}

// names are the documents' names: the resources'.
func (p prepared) names() []string {
	names := make([]string, len(p.files))
	for i, f := range p.files {
		names[i] = f.Name
	}
	return names
}

// Preview returns the rules that a push of resources makes with the
// overlay ov (nil: none), as a Client would put them in use, and the
// overlay's entries that match nothing in them, each a *config.Error
// naming the overlay file, the entry and why.
func Preview(resources []*anypb.Any, ov *config.Overlay, opts config.Options) (*limits.Ruleset, []error, error) {
	p := prepare(resources, ov)
	if p.err != nil {
		return nil, nil, p.err
	}
	rs, err := p.parse(opts)
	if err != nil {
		return nil, nil, err
	}
	return rs, p.overlaid.Unmatched, nil
}

// ReloadOverlay reads the overlay file again. A changed file that parses
// and, applied to the push whose rules are in use, gives good rules, is
// put in use with those rules; one that does not is refused, logged at
// Error and reported as a failed reload, and the overlay in use stays.
// It reports whether the rules changed. Without Options.OverlayPath it
// does nothing.
func (c *Client) ReloadOverlay() (bool, error) {
	if c.o.OverlayPath == "" {
		return false, nil
	}
	c.applyMu.Lock()
	defer c.applyMu.Unlock()
	const restored = "xds overlay restored to one that fits the rules"
	data, err := os.ReadFile(c.o.OverlayPath)
	if err == nil && sum(data) == c.overlay.Checksum {
		c.overlayErr = nil
		c.resolved(restored)
		return false, nil
	}
	var ov *config.Overlay
	if err != nil {
		err = fmt.Errorf("read overlay: %w", err)
	} else {
		ov, err = config.ParseOverlay(c.o.OverlayPath, data)
	}
	var (
		p  prepared
		rs *limits.Ruleset
	)
	if err == nil && c.inUse != nil {
		p = prepare(c.inUse, ov)
		if err = p.err; err == nil {
			rs, err = p.parse(c.o.Rules)
		}
	}
	if err != nil {
		c.overlayErr = err
		c.reject("xds overlay rejected; keeping the overlay in use", zap.String("overlay", c.o.OverlayPath), err)
		return false, err
	}
	c.overlay, c.overlayErr = ov, nil
	if rs == nil {
		c.log.Info("xds overlay loaded; it applies from the first push", zap.String("overlay", c.o.OverlayPath))
		c.resolved(restored)
		return false, nil
	}
	c.log.Info("xds overlay reloaded", zap.String("overlay", c.o.OverlayPath))
	before := c.engine.Rules().Checksum
	c.use(rs, p, restored)
	return rs.Checksum != before, nil
}

// watchOverlay reloads the overlay whenever its file changes, until ctx
// ends.
func (c *Client) watchOverlay(ctx context.Context) {
	err := config.WatchFile(ctx, c.o.OverlayPath, c.o.OverlayDebounce, c.log, func() {
		c.ReloadOverlay() //nolint:errcheck // ReloadOverlay logs its own errors
	})
	if err != nil {
		c.log.Error("xds overlay: cannot watch the file; reload it with SIGHUP", zap.String("overlay", c.o.OverlayPath), zap.Error(err))
	}
}

// reportUnmatched logs the overlay's entries that match nothing in the
// rules about to be used, when they differ from the last ones logged.
// Requires c.applyMu held.
func (c *Client) reportUnmatched(errs []error) {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	c.nUnmatched.Store(int64(len(msgs)))
	if slices.Equal(msgs, c.unmatched) {
		return
	}
	c.unmatched = msgs
	if len(msgs) == 0 {
		c.log.Info("xds overlay: every entry matches the pushed rules", zap.String("overlay", c.o.OverlayPath))
		return
	}
	c.log.Warn("xds overlay entries match nothing in the pushed rules; the rules apply without them",
		zap.String("overlay", c.o.OverlayPath), zap.Strings("unmatched", msgs))
}

func sum(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}
