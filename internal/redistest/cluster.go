package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"testing"

	"github.com/redis/go-redis/v9"
)

// clusterSize is the number of masters of a Cluster.
const clusterSize = 3

// Cluster is a private Redis Cluster of three masters without replicas.
type Cluster struct {
	// Addrs are the "127.0.0.1:port" addresses of the masters.
	Addrs []string
	// Nodes are the master processes, in the order of Addrs.
	Nodes []*Server
}

// StartCluster starts three cluster-enabled redis-servers, joins them with
// `redis-cli --cluster create` and waits until every node reports
// cluster_state:ok with all 16384 slots assigned. The processes are stopped
// at test cleanup. opts apply to every node.
func StartCluster(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	cli := requireBinary(t, "redis-cli")
	c := &Cluster{}
	for range clusterSize {
		s := StartServer(t, append([]Option{withCluster()}, opts...)...)
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), formTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v; output:\n%s", err, out)
	}

	err = poll(formTimeout, func() error {
		for _, addr := range c.Addrs {
			if err := checkClusterNode(addr); err != nil {
				return fmt.Errorf("node %s: %w", addr, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redistest: wait for cluster: %v; redis-cli output:\n%s", err, out)
	}
	return c
}

// checkClusterNode reports whether the node at addr sees a healthy cluster
// of clusterSize masters covering all slots.
func checkClusterNode(addr string) error {
	info, err := doString(addr, cmdTimeout, "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": "16384",
		"cluster_slots_ok":       "16384",
		"cluster_known_nodes":    fmt.Sprint(clusterSize),
		"cluster_size":           fmt.Sprint(clusterSize),
	}
	for field, v := range want {
		if got := infoField(info, field); got != v {
			return fmt.Errorf("%s is %q, want %q", field, got, v)
		}
	}
	return nil
}

// Client returns a go-redis cluster client for the cluster, closed at test
// cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}
