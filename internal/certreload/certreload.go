// Package certreload serves a TLS server's certificate, and the CAs its
// clients' certificates must chain to, from PEM files that it reads again
// when they change on disk, as cert-manager and the kubelet change them.
//
// New handshakes get the files in use at the time; connections already
// made keep what they were made with. A change that does not load (a
// missing or unreadable file, a key that is not the certificate's, an
// expired certificate, a CA file without certificates) keeps everything in
// use as it was, and is reported to Options.OnReload and logged once.
package certreload

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// Defaults of Options.
const (
	// DefaultDebounce lets a burst of file events settle: the kubelet's
	// ..data swap makes several, and a tool that writes the certificate
	// and then the key makes two changes that only load together.
	DefaultDebounce = 100 * time.Millisecond
	// DefaultPoll is how often the files are read even without an event,
	// in case one was missed: a watched directory replaced, or files
	// reached through a symbolic link to a directory that is not watched.
	DefaultPoll = time.Minute
)

// Options name the files and how clients are checked.
type Options struct {
	// CertFile and KeyFile are the server's certificate (with any
	// intermediates after it) and its private key, PEM. Both required.
	CertFile, KeyFile string
	// ClientCAFile, if set, holds the CAs of client certificates, PEM:
	// a client must present a certificate that chains to one of them.
	// Only these CAs are trusted, not the system's.
	ClientCAFile string
	// ClientSAN, if set, is a name the client's certificate must hold:
	// a DNS name or IP address, matched as a server's name is (a DNS SAN
	// *.example.com holds a.example.com), or a URI SAN equal to it
	// (spiffe://cluster.local/ns/edge/sa/envoy). Requires ClientCAFile.
	ClientSAN string
	// MinVersion is the least TLS version accepted; 0: TLS 1.2.
	MinVersion uint16
	// Debounce and Poll: see DefaultDebounce and DefaultPoll; 0 takes the
	// default.
	Debounce, Poll time.Duration
	// OnReload, if set, is called after each attempt to load changed
	// files, with the certificate now in use and the attempt's error.
	// It is not called for the files New reads.
	OnReload func(leaf *x509.Certificate, err error)
}

// Reloader holds the server's TLS state, reloaded from files. It is safe
// for concurrent use.
type Reloader struct {
	o   Options
	log *zap.Logger

	state atomic.Pointer[state]

	mu   sync.Mutex // serializes Reload
	seen [sha256.Size]byte
}

// state is one loaded set of files.
type state struct {
	config *tls.Config // what a handshake uses
	leaf   *x509.Certificate
}

// New reads the files once; an error names the file and what is wrong
// with it.
func New(log *zap.Logger, o Options) (*Reloader, error) {
	switch {
	case o.CertFile == "" || o.KeyFile == "":
		return nil, errors.New("certificate and key files are both required")
	case o.ClientSAN != "" && o.ClientCAFile == "":
		return nil, errors.New("a client SAN needs a client CA file: without client certificates there is no SAN to check")
	}
	if o.MinVersion == 0 {
		o.MinVersion = tls.VersionTLS12
	}
	if o.Debounce <= 0 {
		o.Debounce = DefaultDebounce
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	r := &Reloader{o: o, log: log}
	f := r.read()
	r.seen = f.sum
	st, err := r.load(f, time.Now())
	if err != nil {
		return nil, err
	}
	r.state.Store(st)
	return r, nil
}

// Config returns the server's TLS configuration. Each handshake takes the
// files in use at its start, through GetConfigForClient.
func (r *Reloader) Config() *tls.Config {
	return &tls.Config{
		MinVersion:             r.o.MinVersion,
		NextProtos:             []string{"h2"},
		SessionTicketsDisabled: true,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.state.Load().config, nil
		},
	}
}

// Certificate returns the server certificate in use.
func (r *Reloader) Certificate() *x509.Certificate {
	return r.state.Load().leaf
}

// Reload reads the files and, if any changed since they were last read,
// loads them. It reports whether they changed, and why they did not load;
// then the files in use stay. The same bad files are reported once, not
// at every Reload.
func (r *Reloader) Reload() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The files are read one after the other: a Secret's ..data swap
	// between two reads gives the old certificate and the new key. Read
	// until two reads agree (a few times at most), so that a swap under
	// way is not reported as a pair that does not match.
	f := r.read()
	for range 3 {
		g := r.read()
		if g.sum == f.sum {
			break
		}
		f = g
	}
	if f.sum == r.seen {
		return false, nil
	}
	r.seen = f.sum
	st, err := r.load(f, time.Now())
	if err != nil {
		r.log.Error("tls files did not load; the certificate in use stays",
			zap.String("cert", r.o.CertFile), zap.String("key", r.o.KeyFile), zap.String("client_ca", r.o.ClientCAFile),
			zap.String("serial", serial(r.Certificate())), zap.Error(err))
	} else {
		r.state.Store(st)
		r.log.Info("tls files reloaded",
			zap.String("cert", r.o.CertFile), zap.String("serial", serial(st.leaf)),
			zap.Time("not_after", st.leaf.NotAfter), zap.String("client_ca", r.o.ClientCAFile))
	}
	if r.o.OnReload != nil {
		r.o.OnReload(r.Certificate(), err)
	}
	return true, err
}

// files are the contents of the files, or why each could not be read.
type files struct {
	cert, key, ca []byte
	errs          [3]error
	sum           [sha256.Size]byte // of all of the above
}

func (r *Reloader) read() files {
	var f files
	f.cert, f.errs[0] = os.ReadFile(r.o.CertFile)
	f.key, f.errs[1] = os.ReadFile(r.o.KeyFile)
	if r.o.ClientCAFile != "" {
		f.ca, f.errs[2] = os.ReadFile(r.o.ClientCAFile)
	}
	h := sha256.New()
	for i, b := range [][]byte{f.cert, f.key, f.ca} {
		msg := ""
		if f.errs[i] != nil {
			msg = f.errs[i].Error()
		}
		fmt.Fprintf(h, "%d:%s%d:", len(msg), msg, len(b))
		h.Write(b)
	}
	h.Sum(f.sum[:0])
	return f
}

// load checks f and builds the state that serves it.
func (r *Reloader) load(f files, now time.Time) (*state, error) {
	if err := errors.Join(f.errs[:]...); err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("%s, %s: %w", r.o.CertFile, r.o.KeyFile, err)
	}
	leaf := cert.Leaf // set by X509KeyPair
	if now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("%s: certificate expired at %s", r.o.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	cfg := &tls.Config{
		MinVersion:             r.o.MinVersion,
		Certificates:           []tls.Certificate{cert},
		NextProtos:             []string{"h2"},
		SessionTicketsDisabled: true,
	}
	if r.o.ClientCAFile != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(f.ca) {
			return nil, fmt.Errorf("%s: no PEM certificates", r.o.ClientCAFile)
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = pool
		if r.o.ClientSAN != "" {
			cfg.VerifyConnection = verifySAN(r.o.ClientSAN)
		}
	}
	return &state{config: cfg, leaf: leaf}, nil
}

// verifySAN returns a tls.Config.VerifyConnection that requires the
// client's certificate, already verified, to hold san.
func verifySAN(san string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no client certificate")
		}
		if c := cs.PeerCertificates[0]; !hasSAN(c, san) {
			return fmt.Errorf("client certificate %q does not hold the name %q", c.Subject.CommonName, san)
		}
		return nil
	}
}

// hasSAN reports whether c holds san as a DNS name or IP address, matched
// as host names are, or as a URI.
func hasSAN(c *x509.Certificate, san string) bool {
	if c.VerifyHostname(san) == nil {
		return true
	}
	for _, u := range c.URIs {
		if u.String() == san {
			return true
		}
	}
	return false
}

// Watch reloads when the files change, until ctx ends. It watches the
// directories that hold the files, so a file replaced by a rename, or
// the kubelet's ..data symbolic link swapped, is seen as well as a file
// written in place; events are debounced. Every Options.Poll it reads the
// files even without an event. If the directories cannot be watched, it
// logs why and only polls.
func (r *Reloader) Watch(ctx context.Context) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	w, err := fsnotify.NewWatcher()
	if err != nil {
		r.log.Warn("tls files: cannot watch; reading them every poll period instead", zap.Duration("poll", r.o.Poll), zap.Error(err))
	} else {
		defer w.Close()
		r.addWatches(w)
		events, errs = w.Events, w.Errors
	}
	// A change made between New and the watches is seen now.
	r.Reload() //nolint:errcheck // Reload logs and reports its errors
	poll := time.NewTicker(r.o.Poll)
	defer poll.Stop()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			debounce.Reset(r.o.Debounce)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			r.log.Warn("tls files: watch error", zap.Error(err))
		case <-debounce.C:
			r.addWatches(w) // a directory removed and made again
			r.Reload()      //nolint:errcheck // Reload logs and reports its errors
		case <-poll.C:
			r.addWatches(w)
			r.Reload() //nolint:errcheck // as above
		}
	}
}

// addWatches watches the directories of the files; w may be nil. A
// directory that cannot be watched now is tried again later; polling
// covers it meanwhile.
func (r *Reloader) addWatches(w *fsnotify.Watcher) {
	if w == nil {
		return
	}
	watched := w.WatchList()
	for _, file := range []string{r.o.CertFile, r.o.KeyFile, r.o.ClientCAFile} {
		if file == "" {
			continue
		}
		dir := filepath.Dir(file)
		if slices.Contains(watched, dir) {
			continue
		}
		if err := w.Add(dir); err != nil {
			r.log.Debug("tls files: cannot watch directory yet", zap.String("dir", dir), zap.Error(err))
			continue
		}
		watched = append(watched, dir)
	}
}

// serial is c's serial number in hex, as openssl prints it.
func serial(c *x509.Certificate) string {
	return fmt.Sprintf("%X", c.SerialNumber)
}
