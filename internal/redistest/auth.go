package redistest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// AwaitAuthenticated waits until every connection to each of nodes that
// was open but had not yet sent a command when it was called (CLIENT
// LIST: the default user, cmd=NULL; a connection between its connect and
// its HELLO) has sent one or closed. A test that rotates a password
// calls it after the new password is in place and before it removes
// the old one: a client that read the old password just before the
// change has then used it. Bounded: 10 s a node.
func AwaitAuthenticated(t testing.TB, nodes ...*redis.Client) {
	t.Helper()
	ctx := context.Background()
	for _, c := range nodes {
		list, err := c.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		waiting := unauthenticated(list)
		deadline := time.Now().Add(10 * time.Second)
		for len(waiting) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("redistest: %s: connections %v sent no command in 10s", c.Options().Addr, waiting)
			}
			if list, err = c.ClientList(ctx).Result(); err != nil {
				t.Fatal(err)
			}
			still := unauthenticated(list)
			for id := range waiting {
				if !still[id] {
					delete(waiting, id)
				}
			}
		}
	}
}

// unauthenticated returns the ids of the connections in CLIENT LIST's
// reply list that have sent no command yet, as the default user.
func unauthenticated(list string) map[string]bool {
	ids := map[string]bool{}
	for _, line := range strings.Split(list, "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				f[k] = v
			}
		}
		if f["user"] == "default" && f["cmd"] == "NULL" {
			ids[f["id"]] = true
		}
	}
	return ids
}
