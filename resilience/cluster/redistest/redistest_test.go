package redistest_test

import (
	"testing"

	"github.com/sundial-go/sundial/resilience/cluster/redistest"
)

func TestStartKillRestart(t *testing.T) {
	s := redistest.Start(t)
	if got, err := s.Do("SET", "k", "v"); err != nil || got != "OK" {
		t.Fatalf("SET = %q, %v", got, err)
	}
	if got, err := s.Do("GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want the value", got, err)
	}
	if got, err := s.Do("GET", "missing"); err != nil || got != "" {
		t.Fatalf("GET of a missing key = %q, %v; want \"\"", got, err)
	}
	s.Kill()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING answered after Kill")
	}
	s.Restart()
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Fatalf("PING after Restart = %q, %v", got, err)
	}
	if got, _ := s.Do("EXISTS", "k"); got != "0" {
		t.Fatalf("data survived a restart with persistence off: EXISTS = %s", got)
	}
}

func TestClusterFailover(t *testing.T) {
	c := redistest.StartCluster(t)
	if n := len(c.Addrs()); n != 6 {
		t.Fatalf("Addrs() has %d nodes, want 6", n)
	}
	var masters int
	if err := c.Each(func(s *redistest.Server) error {
		masters++
		_, err := s.Do("PING")
		return err
	}); err != nil || masters != 3 {
		t.Fatalf("Each over masters: %d masters, %v; want 3, nil", masters, err)
	}
	took := c.KillMaster(t, 0)
	t.Logf("failover took %v", took)
	masters = 0
	_ = c.Each(func(*redistest.Server) error { masters++; return nil })
	if masters != 3 {
		t.Fatalf("after the failover %d live masters, want 3 (the replica promoted)", masters)
	}
}
