package bounds

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// socketDir is a directory of its own with a short path: a socket path
// has at most 107 bytes, which t.TempDir's can pass.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "uds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestListenUnix: a socket a dead process left is replaced, and the
// listener removes its file when it closes; a socket that is served, or
// a file that is not a socket, is refused.
func TestListenUnix(t *testing.T) {
	sock := filepath.Join(socketDir(t), "rl.sock")
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()

	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	if _, err := ListenUnix(sock); err == nil || !strings.Contains(err.Error(), "is in use by another process") {
		t.Errorf("a served socket: %v", err)
	}
	l.Close()
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left after Close: %v", err)
	}

	if err := os.WriteFile(sock, []byte("not a socket"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenUnix(sock); err == nil || !strings.Contains(err.Error(), "exists and is not a socket") {
		t.Errorf("a file in the way: %v", err)
	}
}
