// Package gcptest stands in for Google's OAuth 2.0 token endpoint in
// tests: a service account key file whose tokens come from a server on
// loopback, so that Google's credential chain runs for real with nothing
// leaving the machine.
package gcptest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TokenServer grants a service account's JWT assertions the access
// tokens tok-1, tok-2, …, each valid an hour.
type TokenServer struct {
	*httptest.Server
	grants atomic.Int64

	mu    sync.Mutex
	scope string // of the last assertion
}

// NewTokenServer starts a TokenServer, closed at test cleanup.
func NewTokenServer(t testing.TB) *TokenServer {
	ts := &TokenServer{}
	ts.Server = httptest.NewServer(http.HandlerFunc(ts.grant))
	t.Cleanup(ts.Close)
	return ts
}

func (ts *TokenServer) grant(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.Form.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		http.Error(w, "bad grant", http.StatusBadRequest)
		return
	}
	parts := strings.Split(r.Form.Get("assertion"), ".")
	if len(parts) != 3 {
		http.Error(w, "bad assertion", http.StatusBadRequest)
		return
	}
	claims, err := base64.RawURLEncoding.DecodeString(parts[1])
	var c struct {
		Scope string `json:"scope"`
	}
	if err != nil || json.Unmarshal(claims, &c) != nil {
		http.Error(w, "bad claims", http.StatusBadRequest)
		return
	}
	ts.mu.Lock()
	ts.scope = c.Scope
	ts.mu.Unlock()
	n := ts.grants.Add(1)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"access_token":"tok-%d","token_type":"Bearer","expires_in":3600}`, n)
}

// Grants returns how many tokens ts has granted.
func (ts *TokenServer) Grants() int64 { return ts.grants.Load() }

// Scope returns the scope the last assertion asked for.
func (ts *TokenServer) Scope() string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.scope
}

// ServiceAccountFile writes the key file of a service account whose
// tokens come from tokenURL, and returns its path.
func ServiceAccountFile(t testing.TB, tokenURL string) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "p", "private_key_id": "k1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "ratelimit@p.iam.gserviceaccount.com", "client_id": "1", "token_uri": tokenURL,
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sa.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Setenv points Application Default Credentials at a service account of
// ts, and the metadata server nowhere, for the rest of the test.
func (ts *TokenServer) Setenv(t *testing.T) {
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", ServiceAccountFile(t, ts.URL))
	t.Setenv("GCE_METADATA_HOST", "127.0.0.1:1")
}
