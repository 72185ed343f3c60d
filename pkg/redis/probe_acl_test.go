package redis_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestProbeNeedsEveryScriptCommand: for each command that the decision
// scripts call, an ACL user without it fails the probe, so that a probe
// never says Redis takes the store's calls while the ACL refuses one
// of them inside a script (see watch.go: the probe ends ACL refusals).
func TestProbeNeedsEveryScriptCommand(t *testing.T) {
	call := regexp.MustCompile(`redis\.call\('([A-Z]+)'`)
	var cmds []string
	for _, f := range []string{"lib.lua", "apply.lua", "refund.lua"} {
		src, err := os.ReadFile(filepath.Join("scripts", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			if !slices.Contains(cmds, m[1]) {
				cmds = append(cmds, m[1])
			}
		}
	}
	if len(cmds) < 5 {
		t.Fatalf("found only %v in the scripts", cmds)
	}
	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	for _, cmd := range cmds {
		t.Run(cmd, func(t *testing.T) {
			user := "no-" + strings.ToLower(cmd)
			aclSetUser(t, admin, user, "on", ">pw", "~*", "&*", "+@all", "-"+strings.ToLower(cmd))
			s := newStore(t, redis.Options{URL: "redis://" + srv.Addr, Username: user, Password: "pw"})
			err := s.Probe(context.Background())
			if !errors.Is(err, limits.ErrStoreUnavailable) || !strings.Contains(err.Error(), "can't run this command") {
				t.Errorf("Probe without %s: %v; want an unavailable error, refused by the ACL", cmd, err)
			}
		})
	}
}

// aclSetUser runs ACL SETUSER user rules... on c.
func aclSetUser(t *testing.T, c *goredis.Client, user string, rules ...string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", user}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := c.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s on %s: %v", user, c.Options().Addr, err)
	}
}
