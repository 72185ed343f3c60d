package redistest

import (
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Sentinel settings: a quick failover with a single sentinel.
const (
	sentinelMasterName  = "mymaster"
	sentinelQuorum      = 1
	downAfterMillis     = 500
	failoverTimeoutMsec = 2000
)

// Sentinel is a private Redis Sentinel setup: one master, one replica and
// one sentinel with quorum 1 (or several, with a majority as quorum),
// tuned so that a failover completes within a few seconds after the
// master dies.
type Sentinel struct {
	// MasterName is the name the sentinel monitors the master under.
	MasterName string
	// SentinelAddrs are the "127.0.0.1:port" addresses of the sentinels.
	SentinelAddrs []string
	// Master is the initial master. After a failover it is no longer the
	// master.
	Master *Server
	// Replica is the initial replica, promoted by a failover.
	Replica *Server
	// Sentinels are the sentinel processes, in the order of SentinelAddrs.
	Sentinels []*Server
}

// StartSentinel starts a master, a replica of it and a sentinel watching
// them, and waits until the replica is in sync and the sentinel knows both
// the master and the replica, so that killing Master triggers a failover
// to Replica. The processes are stopped at test cleanup.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	return StartSentinels(t, 1)
}

// StartSentinels is StartSentinel with n sentinels, a majority of which
// must agree that the master is down. It waits, too, until every
// sentinel knows the others, so that they hear of each other's failovers.
func StartSentinels(t testing.TB, n int) *Sentinel {
	t.Helper()
	// Without a delay the master starts the diskless sync at once instead
	// of waiting 5 s for more replicas.
	noDelay := WithArgs("--repl-diskless-sync-delay", "0")
	master := StartServer(t, noDelay)
	replica := StartServer(t, noDelay, WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(master.port)))

	err := poll(formTimeout, func() error {
		info, err := doString(replica.Addr, cmdTimeout, "INFO", "replication")
		if err != nil {
			return err
		}
		if v := infoField(info, "master_link_status"); v != "up" {
			return fmt.Errorf("master_link_status is %q, want \"up\"", v)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redistest: wait for replica %s to sync with %s: %v", replica.Addr, master.Addr, err)
	}

	quorum := max(sentinelQuorum, n/2+1)
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
		"sentinel down-after-milliseconds %[1]s %[4]d\n"+
		"sentinel failover-timeout %[1]s %[5]d\n"+
		"sentinel parallel-syncs %[1]s 1\n",
		sentinelMasterName, master.port, quorum, downAfterMillis, failoverTimeoutMsec)
	s := &Sentinel{
		MasterName: sentinelMasterName,
		Master:     master,
		Replica:    replica,
	}
	for range n {
		sentinel := StartServer(t, withSentinel(conf))
		s.SentinelAddrs = append(s.SentinelAddrs, sentinel.Addr)
		s.Sentinels = append(s.Sentinels, sentinel)
	}
	err = poll(formTimeout, func() error {
		for _, addr := range s.SentinelAddrs {
			if err := checkSentinel(addr, s.MasterName, master.Addr, replica.Addr, n-1); err != nil {
				return fmt.Errorf("sentinel %s: %w", addr, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redistest: wait for the sentinels to discover master %s, replica %s and each other: %v",
			master.Addr, replica.Addr, err)
	}
	return s
}

// checkSentinel reports whether the sentinel at addr sees master as a
// healthy master, replica as a healthy replica of it, and others other
// sentinels.
func checkSentinel(addr, name, master, replica string, others int) error {
	reply, err := do(addr, cmdTimeout, "SENTINEL", "MASTER", name)
	if err != nil {
		return err
	}
	m := pairs(reply)
	if got := m["ip"] + ":" + m["port"]; got != master {
		return fmt.Errorf("master is %s, want %s", got, master)
	}
	if m["flags"] != "master" {
		return fmt.Errorf("master flags are %q, want \"master\"", m["flags"])
	}
	if got := m["num-other-sentinels"]; got != strconv.Itoa(others) {
		return fmt.Errorf("knows %s other sentinels, want %d", got, others)
	}
	reply, err = do(addr, cmdTimeout, "SENTINEL", "REPLICAS", name)
	if err != nil {
		return err
	}
	replicas, _ := reply.([]any)
	for _, r := range replicas {
		m := pairs(r)
		if m["ip"]+":"+m["port"] != replica {
			continue
		}
		if m["flags"] != "slave" || m["master-link-status"] != "ok" {
			return fmt.Errorf("replica has flags %q and master-link-status %q", m["flags"], m["master-link-status"])
		}
		return nil
	}
	return errors.New("replica not discovered yet")
}

// FailoverClient returns a go-redis failover client that finds the master
// through the sentinels, closed at test cleanup.
func (s *Sentinel) FailoverClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    s.MasterName,
		SentinelAddrs: s.SentinelAddrs,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Failover asks the first sentinel for a graceful failover (SENTINEL
// FAILOVER) and waits until it names Replica as the master. Master keeps
// running: it is still a master for a while afterwards, until the
// sentinel makes it a replica of the new one (some 10 s later).
func (s *Sentinel) Failover(t testing.TB) {
	t.Helper()
	addr := s.SentinelAddrs[0]
	if _, err := do(addr, cmdTimeout, "SENTINEL", "FAILOVER", s.MasterName); err != nil {
		t.Fatalf("redistest: SENTINEL FAILOVER %s: %v", s.MasterName, err)
	}
	err := poll(formTimeout, func() error {
		reply, err := do(addr, cmdTimeout, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
		if err != nil {
			return err
		}
		ipPort, _ := reply.([]any)
		if len(ipPort) != 2 {
			return fmt.Errorf("master address %v", reply)
		}
		if got := fmt.Sprintf("%v:%v", ipPort[0], ipPort[1]); got != s.Replica.Addr {
			return fmt.Errorf("master is %s, want %s", got, s.Replica.Addr)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redistest: wait for sentinel %s to switch to %s: %v", addr, s.Replica.Addr, err)
	}
}
