package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// TestRole: role tells a master from a replica, over RESP3 and RESP2,
// for a user that may not call ROLE or INFO (both @admin and
// @dangerous), as applications' users often may not.
func TestRole(t *testing.T) {
	ctx := context.Background()
	master := redistest.StartServer(t)
	_, port, _ := strings.Cut(master.Addr, ":")
	replica := redistest.StartServer(t, redistest.WithArgs("--replicaof", "127.0.0.1", port))
	for _, srv := range []*redistest.Server{master, replica} {
		err := srv.Client(t).Do(ctx, "ACL", "SETUSER", "app", "on", ">secret", "~*", "+@all", "-@admin", "-@dangerous").Err()
		if err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		give *redistest.Server
		want string
	}{
		{give: master, want: "master"},
		{give: replica, want: "replica"},
	}
	for _, tt := range tests {
		for _, proto := range []int{2, 3} {
			t.Run(tt.want+"/RESP"+strconv.Itoa(proto), func(t *testing.T) {
				c := goredis.NewClient(&goredis.Options{Addr: tt.give.Addr, Username: "app", Password: "secret", Protocol: proto})
				defer c.Close()
				if err := c.Do(ctx, "ROLE").Err(); err == nil {
					t.Fatal("the user may call ROLE: the test does not test what it means to")
				}
				got, err := role(ctx, c)
				if err != nil || got != tt.want {
					t.Errorf("role = %q, %v; want %q", got, err, tt.want)
				}
			})
		}
	}
}
