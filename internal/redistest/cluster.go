package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSize is the number of masters of a Cluster.
const clusterSize = 3

// Cluster is a private Redis Cluster of three masters, with or without
// a replica each.
type Cluster struct {
	// Addrs are the "127.0.0.1:port" addresses of the masters.
	Addrs []string
	// Nodes are the master processes, in the order of Addrs.
	Nodes []*Server
	// Replicas are the replica processes of StartClusterWithReplicas,
	// Replicas[i] replicating Nodes[i]; nil otherwise.
	Replicas []*Server
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
			if err := checkClusterNode(addr, clusterSize); err != nil {
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

// FailoverNodeTimeout is the cluster-node-timeout of the nodes of
// StartClusterWithReplicas: a master that answers no ping for this long
// is failed, and its replica promoted about a second later.
const FailoverNodeTimeout = 1000 * time.Millisecond

// StartClusterWithReplicas starts a Cluster of three masters and a replica
// of each, whose nodes give up on a silent master after
// FailoverNodeTimeout, so that a replica is promoted within a few seconds
// of its master's death (see FailOver). opts apply to every node.
func StartClusterWithReplicas(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	cli := requireBinary(t, "redis-cli")
	opts = append([]Option{withCluster(), WithArgs(
		"--cluster-node-timeout", fmt.Sprint(FailoverNodeTimeout.Milliseconds()),
		// However long ago a replica last heard from its master, it may
		// be promoted: the tests kill masters at any moment.
		"--cluster-replica-validity-factor", "0",
	)}, opts...)
	var all []*Server
	for range 2 * clusterSize {
		all = append(all, StartServer(t, opts...))
	}
	var addrs []string
	for _, s := range all {
		addrs = append(addrs, s.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), formTimeout)
	defer cancel()
	// redis-cli makes the first clusterSize addresses masters and gives
	// each a replica from the rest.
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v; output:\n%s", err, out)
	}
	c := &Cluster{}
	err = poll(formTimeout, func() error {
		masters, replicas, err := roles(all)
		if err != nil {
			return err
		}
		c.Nodes, c.Replicas, c.Addrs = masters, replicas, nil
		for _, m := range masters {
			c.Addrs = append(c.Addrs, m.Addr)
		}
		for _, s := range all {
			if err := checkClusterNode(s.Addr, 2*clusterSize); err != nil {
				return fmt.Errorf("node %s: %w", s.Addr, err)
			}
		}
		// A replica that has not synchronised once cannot be promoted.
		for _, r := range c.Replicas {
			info, err := doString(r.Addr, cmdTimeout, "INFO", "replication")
			if err != nil {
				return err
			}
			if got := infoField(info, "master_link_status"); got != "up" {
				return fmt.Errorf("replica %s: master_link_status %q", r.Addr, got)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redistest: wait for cluster: %v; redis-cli output:\n%s", err, out)
	}
	return c
}

// roles sorts the nodes of a replicated cluster into its masters and the
// replica of each, in the masters' order, from CLUSTER NODES.
func roles(all []*Server) (masters, replicas []*Server, err error) {
	byID := map[string]*Server{}
	ids := map[*Server]string{}
	for _, s := range all {
		id, err := doString(s.Addr, cmdTimeout, "CLUSTER", "MYID")
		if err != nil {
			return nil, nil, err
		}
		byID[id], ids[s] = s, id
	}
	nodes, err := doString(all[0].Addr, cmdTimeout, "CLUSTER", "NODES")
	if err != nil {
		return nil, nil, err
	}
	replicaOf := map[string]*Server{} // master id -> its replica
	for line := range strings.SplitSeq(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.Contains(f[2], "slave") || f[3] == "-" {
			continue
		}
		if s, ok := byID[f[0]]; ok {
			replicaOf[f[3]] = s
		}
	}
	for _, s := range all {
		if r, ok := replicaOf[ids[s]]; ok {
			masters, replicas = append(masters, s), append(replicas, r)
		}
	}
	if len(masters) != clusterSize {
		return nil, nil, fmt.Errorf("%d masters with a replica, want %d", len(masters), clusterSize)
	}
	return masters, replicas, nil
}

// FailOver kills master i with SIGKILL and waits until its replica is a
// master that the other nodes see serving its slots. It returns how long
// the promotion took.
func (c *Cluster) FailOver(t testing.TB, i int) time.Duration {
	t.Helper()
	if c.Replicas == nil {
		t.Fatal("redistest: FailOver needs StartClusterWithReplicas")
	}
	start := time.Now()
	c.Nodes[i].Kill()
	r := c.Replicas[i]
	err := poll(formTimeout, func() error {
		role, err := do(r.Addr, cmdTimeout, "ROLE")
		if err != nil {
			return err
		}
		if a, ok := role.([]any); !ok || len(a) == 0 || a[0] != "master" {
			return fmt.Errorf("replica %s is not a master yet", r.Addr)
		}
		for j, m := range c.Nodes {
			if j == i {
				continue
			}
			info, err := doString(m.Addr, cmdTimeout, "CLUSTER", "INFO")
			if err != nil {
				return err
			}
			if got := infoField(info, "cluster_state"); got != "ok" {
				return fmt.Errorf("node %s: cluster_state %q", m.Addr, got)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redistest: fail over master %s: %v", c.Nodes[i].Addr, err)
	}
	return time.Since(start)
}

// checkClusterNode reports whether the node at addr sees a healthy cluster
// of clusterSize masters covering all slots, and known nodes in all
// (clusterSize, or twice as many with a replica each).
func checkClusterNode(addr string, known int) error {
	info, err := doString(addr, cmdTimeout, "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": "16384",
		"cluster_slots_ok":       "16384",
		"cluster_known_nodes":    fmt.Sprint(known),
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
