package redisauth_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// secretDir is a directory laid out as Kubernetes lays out a secret
// volume: each key is a link to ..data/key, and ..data a link to a
// directory of the current version, swapped by one rename.
type secretDir struct {
	dir     string
	version int
}

// newSecretDir returns a secret volume holding data.
func newSecretDir(t *testing.T, data map[string]string) *secretDir {
	t.Helper()
	d := &secretDir{dir: t.TempDir()}
	d.update(t, data)
	for k := range data {
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(d.dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// path returns the path of key's file.
func (d *secretDir) path(key string) string { return filepath.Join(d.dir, key) }

// update writes a new version of the volume, and swaps ..data to it.
func (d *secretDir) update(t *testing.T, data map[string]string) {
	t.Helper()
	d.version++
	ver := filepath.Join(d.dir, fmt.Sprintf("..v%d", d.version))
	if err := os.Mkdir(ver, 0o700); err != nil {
		t.Fatal(err)
	}
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(ver, k), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ver), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if d.version > 1 {
		if err := os.RemoveAll(filepath.Join(d.dir, fmt.Sprintf("..v%d", d.version-1))); err != nil {
			t.Fatal(err)
		}
	}
}
