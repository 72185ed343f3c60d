package redisauth_test

import (
	"context"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redisauth"
)

// BenchmarkFileCredentials is what a new Redis connection pays for
// credentials from files: a stat of each file (no read while unchanged).
func BenchmarkFileCredentials(b *testing.B) {
	dir := b.TempDir()
	user, pass := filepath.Join(dir, "username"), filepath.Join(dir, "password")
	for path, v := range map[string]string{user: "app", pass: "secret"} {
		if err := writeFile(path, v); err != nil {
			b.Fatal(err)
		}
	}
	us, err := redisauth.OpenSecret(user, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	ps, err := redisauth.OpenSecret(pass, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	f := redisauth.NewFile("", us, "", ps)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := f.Credentials(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
