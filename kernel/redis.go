package kernel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster"
)

// redisSettings is the parsed section Sundial.Kernel.Redis: the store of
// cluster-scoped limits (docs/cluster.md) and of anything else the kernel
// shares between replicas.
type redisSettings struct {
	// Address is host:port of one server (required unless Addresses).
	Address string
	// Addresses are host:port of Redis Cluster nodes (the seeds the
	// client learns the cluster from); set instead of Address.
	Addresses []string
	// Cluster connects to a Redis Cluster through Address alone.
	Cluster bool
	// DB is the database number (default 0).
	DB int
	// Username is the ACL user (default: none).
	Username string
	// PasswordEnv names the environment variable holding the password; the
	// password itself is never written in a config file.
	PasswordEnv string
	// TLS, when set, connects with TLS.
	TLS *redisTLS
	// PoolSize bounds the connections (default: go-redis's, 10 per CPU).
	PoolSize int
	// KeyPrefix starts every key (default "sundial"); replicas that share
	// limits must share it.
	KeyPrefix string
}

// redisTLS is Sundial.Kernel.Redis.TLS.
type redisTLS struct {
	// ServerName overrides the name the certificate is checked against.
	ServerName string
	// CAFile is a PEM file of the CAs to trust (default: the system's).
	CAFile string
}

var redisKeys = []string{"Address", "Addresses", "Cluster", "DB", "Username", "PasswordEnv", "TLS", "PoolSize", "KeyPrefix"}

// parseRedis validates Sundial.Kernel.Redis.
func parseRedis(raw any, path string) (*redisSettings, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("kernel: %s: want an object, got %s", path, jsonType(raw))
	}
	r := &redisSettings{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if err := r.set(k, m[k], path+"."+k); err != nil {
			return nil, err
		}
	}
	switch {
	case r.Address == "" && len(r.Addresses) == 0:
		return nil, fmt.Errorf("kernel: %s.Address: required (host:port), or Addresses for a Redis Cluster", path)
	case r.Address != "" && len(r.Addresses) > 0:
		return nil, fmt.Errorf("kernel: %s.Addresses: set Address or Addresses, not both", path)
	case r.clustered() && r.DB != 0:
		return nil, fmt.Errorf("kernel: %s.DB: a Redis Cluster has database 0 only, got %d", path, r.DB)
	}
	return r, nil
}

// set parses the key k of Sundial.Kernel.Redis, at path p, into r.
func (r *redisSettings) set(k string, v any, p string) (err error) {
	switch k {
	case "Address":
		return redisString(&r.Address, v, p)
	case "Addresses":
		r.Addresses, err = redisAddresses(v, p)
		return err
	case "Cluster":
		b, ok := v.(bool)
		if !ok {
			return fmt.Errorf("kernel: %s: want true or false, got %s", p, jsonType(v))
		}
		r.Cluster = b
		return nil
	case "Username":
		return redisString(&r.Username, v, p)
	case "PasswordEnv":
		return redisString(&r.PasswordEnv, v, p)
	case "KeyPrefix":
		if err = redisString(&r.KeyPrefix, v, p); err == nil && (r.KeyPrefix == "" || strings.ContainsAny(r.KeyPrefix, "{}")) {
			err = fmt.Errorf("kernel: %s: want a non-empty prefix without braces, got %q", p, r.KeyPrefix)
		}
		return err
	case "DB":
		return redisInt(&r.DB, v, p, 0)
	case "PoolSize":
		return redisInt(&r.PoolSize, v, p, 1)
	case "TLS":
		r.TLS, err = parseRedisTLS(v, p)
		return err
	}
	return fmt.Errorf("kernel: %s: unknown key (known keys: %s)", p, strings.Join(redisKeys, ", "))
}

// clustered reports whether the settings name a Redis Cluster.
func (r *redisSettings) clustered() bool { return r.Cluster || len(r.Addresses) > 0 }

// maxRedisAddresses bounds Sundial.Kernel.Redis.Addresses.
const maxRedisAddresses = 64

// redisAddresses reads Sundial.Kernel.Redis.Addresses: 1 to 64
// non-empty strings.
func redisAddresses(v any, p string) ([]string, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 || len(list) > maxRedisAddresses {
		return nil, fmt.Errorf("kernel: %s: want an array of 1 to %d host:port strings, got %s", p, maxRedisAddresses, jsonType(v))
	}
	out := make([]string, len(list))
	for i, a := range list {
		if s, ok := a.(string); !ok || s == "" {
			return nil, fmt.Errorf("kernel: %s[%d]: want a host:port string, got %v", p, i, a)
		}
		out[i] = a.(string)
	}
	return out, nil
}

// redisString reads a string key of Sundial.Kernel.Redis.
func redisString(dst *string, v any, p string) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("kernel: %s: want a string, got %s", p, jsonType(v))
	}
	*dst = s
	return nil
}

// redisInt reads DB (minimum 0) or PoolSize (minimum 1).
func redisInt(dst *int, v any, p string, minimum float64) error {
	f, ok := number(v)
	if !ok || f != math.Trunc(f) || f < minimum || f > maxInt {
		return fmt.Errorf("kernel: %s: want a non-negative integer (PoolSize: positive), got %v", p, v)
	}
	*dst = int(f)
	return nil
}

func parseRedisTLS(raw any, path string) (*redisTLS, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("kernel: %s: want an object, got %s", path, jsonType(raw))
	}
	t := &redisTLS{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s, ok := m[k].(string)
		if !ok {
			return nil, fmt.Errorf("kernel: %s.%s: want a string, got %s", path, k, jsonType(m[k]))
		}
		switch k {
		case "ServerName":
			t.ServerName = s
		case "CAFile":
			t.CAFile = s
		default:
			return nil, fmt.Errorf("kernel: %s.%s: unknown key (known keys: ServerName, CAFile)", path, k)
		}
	}
	return t, nil
}

// WithRedis hands the kernel a Redis client for cluster-scoped limits (and
// other state shared between replicas) instead of Sundial.Kernel.Redis.
// The kernel does not close it. Set it up like cluster.NewClient does:
// context timeouts on, MaxRetries -1. A nil client, typed or not, is a
// no-op.
func WithRedis(c redis.UniversalClient) Option {
	return optionFunc(func(o *options) {
		if c != nil && !isNilPointer(c) {
			o.redis = c
		}
	})
}

// isNilPointer reports whether v holds a nil pointer (a typed nil client
// must not pass for one).
func isNilPointer(v any) bool {
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}

// newRedisClient builds the client of Sundial.Kernel.Redis: a
// ClusterClient when it names a Redis Cluster (Addresses, or Cluster
// true), else a Client.
func newRedisClient(r *redisSettings, lookupEnv func(string) (string, bool)) (redis.UniversalClient, error) {
	o := &redis.Options{Addr: r.Address, DB: r.DB, Username: r.Username, PoolSize: r.PoolSize}
	if r.PasswordEnv != "" {
		pw, ok := lookupEnv(r.PasswordEnv)
		if !ok {
			return nil, fmt.Errorf("kernel: Sundial.Kernel.Redis.PasswordEnv: environment variable %s is not set", r.PasswordEnv)
		}
		o.Password = pw
	}
	if r.TLS != nil {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: r.TLS.ServerName}
		if r.TLS.CAFile != "" {
			pem, err := readConfigFile(r.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("kernel: Sundial.Kernel.Redis.TLS.CAFile: %s: %w", r.TLS.CAFile, err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("kernel: Sundial.Kernel.Redis.TLS.CAFile: no PEM certificate in %s", r.TLS.CAFile)
			}
		}
		o.TLSConfig = tc
	}
	if r.clustered() {
		addrs := r.Addresses
		if len(addrs) == 0 {
			addrs = []string{r.Address}
		}
		return cluster.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Username: o.Username, Password: o.Password,
			PoolSize: o.PoolSize, TLSConfig: o.TLSConfig}), nil
	}
	return cluster.NewClient(o), nil
}

// redisLoadTimeout bounds the script load at New: a wrong address fails
// fast instead of hanging start-up.
const redisLoadTimeout = 2 * time.Second

// setUpCluster creates the Redis client and the cluster store when the
// configuration needs them. Any operation whose merged policy is
// cluster-scoped needs Redis: without it New fails.
func (k *Kernel) setUpCluster(o *options) error {
	clustered := k.clustered(k.live.Load().policies)
	switch {
	case o.redis != nil:
		k.rdb = o.redis
	case k.settings.Redis != nil:
		c, err := newRedisClient(k.settings.Redis, o.lookupEnv)
		if err != nil {
			return err
		}
		k.rdb, k.ownsRedis = c, true
	}
	if len(clustered) == 0 {
		return nil
	}
	if err := k.needRedis(clustered); err != nil {
		return err
	}
	k.startStore()
	return nil
}

// clustered returns the registered operations whose policy under ps is
// cluster-scoped with a rate or concurrency limit.
func (k *Kernel) clustered(ps policies) []string {
	var ids []string
	for _, d := range k.registry.All() {
		t := ps.Resolve(d.ID)
		if p := limitsPolicy(d, t.Policy, t.Stream); p.Scope == resilience.ScopeCluster && (p.PermitLimit > 0 || p.ConcurrencyLimit > 0 || p.PerKey.PermitLimit > 0) {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// needRedis fails when cluster-scoped operations have no Redis.
func (k *Kernel) needRedis(clustered []string) error {
	if len(clustered) > 0 && k.rdb == nil {
		return fmt.Errorf("kernel: Sundial.Kernel.Resilience: Scope \"cluster\" needs Redis, and none is configured (set Sundial.Kernel.Redis or use kernel.WithRedis); cluster-scoped operations: %s",
			strings.Join(clustered, ", "))
	}
	return nil
}

// startStore creates the cluster store on k.rdb and loads its scripts.
func (k *Kernel) startStore() {
	prefix := cluster.DefaultKeyPrefix
	if k.settings.Redis != nil && k.settings.Redis.KeyPrefix != "" {
		prefix = k.settings.Redis.KeyPrefix
	}
	st := cluster.New(k.rdb, cluster.Config{KeyPrefix: prefix, Logger: k.logger})
	k.store.Store(st)
	ctx, cancel := context.WithTimeout(context.Background(), redisLoadTimeout)
	defer cancel()
	if err := st.Load(ctx); err != nil {
		// Not fatal: the limits start degraded and recover when Redis answers.
		k.logger.Warn("kernel: Sundial.Kernel.Redis: the store does not answer at start-up; cluster limits start degraded", "error", err.Error())
	}
}

// clusterOptions returns the shared window and slots of operation id when
// its policy is cluster-scoped.
func (k *Kernel) clusterOptions(id string, p resilience.Policy) []resilience.Option {
	st := k.store.Load()
	if st == nil || p.Scope != resilience.ScopeCluster {
		return nil
	}
	var opts []resilience.Option
	if p.PermitLimit > 0 {
		if w, err := st.Window(id, p); err == nil {
			opts = append(opts, resilience.WithSharedWindow(w))
		}
	}
	if p.ConcurrencyLimit > 0 {
		if s, err := st.Slots(id, p); err == nil {
			opts = append(opts, resilience.WithSharedSlots(s))
		}
	}
	if p.PerKey.PermitLimit > 0 {
		if w, err := st.KeyedWindow(id, p); err == nil {
			opts = append(opts, resilience.WithSharedKeyedWindow(w))
		}
	}
	return opts
}

// Close releases what the kernel holds outside the process. It stops the
// cluster store, removing this replica from the count. It closes the Redis
// client the kernel made itself, but not one handed in with WithRedis. It
// closes the limits of your own kinds that are io.Closers (WithLimitKind).
// Call it after the servers have stopped. It drains the streams still open
// (DrainStreams). It is safe to call more than once, and concurrently with
// Reload. A Reload after Close returns ErrClosed: it would start a store
// nothing stops.
func (k *Kernel) Close() error {
	var err error
	k.closeOnce.Do(func() {
		k.DrainStreams()
		k.reloadMu.Lock()
		k.closed = true
		for id, c := range k.custom {
			k.closeCustom(id, c)
		}
		k.reloadMu.Unlock()
		if st := k.store.Load(); st != nil {
			err = st.Close()
		}
		if k.ownsRedis && k.rdb != nil {
			if cerr := k.rdb.Close(); err == nil {
				err = cerr
			}
		}
	})
	return err
}
