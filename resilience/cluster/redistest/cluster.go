package redistest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Cluster is a real Redis Cluster owned by a test. It has three masters,
// each with one replica, on free 127.0.0.1 ports. Persistence is off; data
// directories are under the test's temporary directory. A master's failure
// is detected within about a second (cluster-node-timeout 500 ms). Its
// replica then takes over by itself.
//
// The cluster is built with CLUSTER ADDSLOTSRANGE, MEET and REPLICATE
// (as `redis-cli --cluster create` does), so it needs redis-server only.
type Cluster struct {
	masters  []*Server
	replicas []*Server
	dir      string // removed by stop when the cluster made it
	ownsDir  bool
}

// clusterNodeTimeout is the nodes' cluster-node-timeout: how long a node
// may be unreachable before it is suspected failed.
const clusterNodeTimeout = 500 * time.Millisecond

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// clusterReady bounds the wait for a cluster to be formed or to recover.
const clusterReady = 30 * time.Second

// StartCluster starts a cluster of three masters and three replicas for
// tb, and registers its end with tb.Cleanup. It takes about a second.
// Without redis-server it fails the test under CI and skips it otherwise,
// as [Start] does.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	bin := lookPath(tb)
	c, err := launchCluster(bin, tb.TempDir(), false)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(c.stop)
	return c
}

var shared struct {
	once sync.Once
	c    *Cluster
	err  error
}

// SharedCluster returns the cluster shared by the tests of this process,
// started by the first call. A test package that calls it wraps its
// TestMain's m with [StopSharedAfter], which stops the cluster once the
// tests have run. Tests that kill its nodes start their own
// ([StartCluster]).
func SharedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	bin := lookPath(tb)
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "redistest-cluster-")
		if err != nil {
			shared.err = err
			return
		}
		shared.c, shared.err = launchCluster(bin, dir, true)
	})
	if shared.err != nil {
		tb.Fatalf("redistest: shared cluster: %v", shared.err)
	}
	return shared.c
}

// StopSharedAfter wraps m, a TestMain's *testing.M. The wrapper's Run also
// stops the cluster of [SharedCluster], if one was started, once the tests
// have run. A leak check after it then finds none of its processes'
// waiters:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(redistest.StopSharedAfter(m)) }
func StopSharedAfter(m interface{ Run() int }) interface{ Run() int } { return stopShared{m} }

type stopShared struct{ m interface{ Run() int } }

func (s stopShared) Run() int {
	defer func() {
		if shared.c != nil {
			shared.c.stop()
		}
	}()
	return s.m.Run()
}

// launchCluster starts six nodes with data under dir and forms the cluster.
func launchCluster(bin, dir string, ownsDir bool) (_ *Cluster, err error) {
	c := &Cluster{dir: dir, ownsDir: ownsDir}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	var all []*Server
	for i := range 6 {
		d := filepath.Join(dir, "node-"+strconv.Itoa(i))
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		s := &Server{bin: bin, dir: d}
		// The cluster bus gets a free port of its own: the default,
		// port+10000, may be taken or above 65535.
		if err := s.startOnFreePort(func() error {
			port, err := listenFree()
			if err != nil {
				return err
			}
			bus, err := listenFree()
			if err != nil {
				return err
			}
			s.port, s.bus = port, bus
			s.extra = []string{
				"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(d, "nodes.conf"),
				"--cluster-port", strconv.Itoa(bus),
				"--cluster-node-timeout", strconv.FormatInt(clusterNodeTimeout.Milliseconds(), 10),
				"--repl-diskless-sync-delay", "0",
			}
			return nil
		}); err != nil {
			return nil, err
		}
		all = append(all, s)
		if i < 3 {
			c.masters = append(c.masters, s)
		} else {
			c.replicas = append(c.replicas, s)
		}
	}
	for i, m := range c.masters {
		lo, hi := i*clusterSlots/len(c.masters), (i+1)*clusterSlots/len(c.masters)-1
		if _, err := m.do("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return nil, fmt.Errorf("CLUSTER ADDSLOTSRANGE on %s: %w", m.Addr(), err)
		}
	}
	for _, s := range all[1:] {
		if _, err := all[0].do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.port), strconv.Itoa(s.bus)); err != nil {
			return nil, fmt.Errorf("CLUSTER MEET %s: %w", s.Addr(), err)
		}
	}
	// A replica can follow its master once it knows it.
	for i, r := range c.replicas {
		id, err := c.masters[i].do("CLUSTER", "MYID")
		if err != nil {
			return nil, err
		}
		if err := waitFor(func() error {
			_, err := r.do("CLUSTER", "REPLICATE", id)
			return err
		}); err != nil {
			return nil, fmt.Errorf("CLUSTER REPLICATE on %s: %w", r.Addr(), err)
		}
	}
	if err := c.wait(); err != nil {
		return nil, err
	}
	return c, nil
}

// waitFor calls f until it returns nil, for at most clusterReady.
func waitFor(f func() error) error {
	deadline := time.Now().Add(clusterReady)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wait waits until every live node reports cluster_state:ok with every slot
// served, and every live replica's link to its master is up.
func (c *Cluster) wait() error {
	return waitFor(func() error {
		for _, s := range c.live() {
			info, err := s.do("CLUSTER", "INFO")
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
				return fmt.Errorf("%s: cluster not ready:\n%s", s.Addr(), info)
			}
			repl, err := s.do("INFO", "replication")
			if err != nil {
				return err
			}
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("%s: replica not linked to its master", s.Addr())
			}
		}
		return nil
	})
}

// live returns the nodes whose process runs.
func (c *Cluster) live() []*Server {
	var out []*Server
	for _, s := range append(append([]*Server(nil), c.masters...), c.replicas...) {
		s.mu.Lock()
		up := s.cmd != nil
		s.mu.Unlock()
		if up {
			out = append(out, s)
		}
	}
	return out
}

// Addrs returns host:port of every node: the seed addresses of a client.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, s := range append(append([]*Server(nil), c.masters...), c.replicas...) {
		out = append(out, s.Addr())
	}
	return out
}

// KillMaster kills master i with SIGKILL. It waits until the replica has
// taken over and the cluster is ok again, and returns how long that took.
func (c *Cluster) KillMaster(tb testing.TB, i int) time.Duration {
	tb.Helper()
	start := time.Now()
	c.masters[i].Kill()
	if err := c.wait(); err != nil {
		tb.Fatalf("redistest: no failover after killing %s: %v", c.masters[i].Addr(), err)
	}
	return time.Since(start)
}

// KillMasterOf is [Cluster.KillMaster] on the master that served key's
// slot when the cluster was formed.
func (c *Cluster) KillMasterOf(tb testing.TB, key string) time.Duration {
	tb.Helper()
	out, err := c.masters[0].do("CLUSTER", "KEYSLOT", key)
	if err != nil {
		tb.Fatalf("redistest: CLUSTER KEYSLOT %s: %v", key, err)
	}
	slot, err := strconv.Atoi(out)
	if err != nil {
		tb.Fatalf("redistest: CLUSTER KEYSLOT %s = %q", key, out)
	}
	i := 0
	for i+1 < len(c.masters) && slot >= (i+1)*clusterSlots/len(c.masters) {
		i++
	}
	return c.KillMaster(tb, i)
}

// Each calls f with every live master, and returns the first error.
func (c *Cluster) Each(f func(*Server) error) error {
	var errs []error
	for _, s := range c.live() {
		if role, err := s.do("ROLE"); err == nil && role == "3" {
			errs = append(errs, f(s))
		}
	}
	return errors.Join(errs...)
}

// stop kills every node and waits for them to exit.
func (c *Cluster) stop() {
	for _, s := range append(append([]*Server(nil), c.masters...), c.replicas...) {
		s.stop()
	}
	if c.ownsDir {
		_ = os.RemoveAll(c.dir)
	}
}
