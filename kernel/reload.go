package kernel

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/knadh/koanf/providers/file"

	"github.com/sundial-go/sundial/kernel/internal/config"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// liveConfig is the part of the configuration a reload changes: the
// resilience policies and the kernel-wide limits that apply per call.
type liveConfig struct {
	maxTimeout    time.Duration
	maxStragglers int
	policies      policies
	dependencies  map[string]outbound.Policy
}

// Reload results (the result attribute of the sundial.config.reloads
// metric).
const (
	reloadOK        = "ok"        // the new configuration is in force
	reloadInvalid   = "invalid"   // refused: the last good one stays
	reloadUnchanged = "unchanged" // nothing to apply
)

var reloadResults = [...]string{reloadOK, reloadInvalid, reloadUnchanged}

// startupOnly are the keys of Sundial.Kernel that a reload does not apply.
// Changing them takes a restart. A reload that changes them logs that it
// ignored them.
var startupOnly = []string{"UseBuiltInMiddleware", "Redis", "IdempotencyStore"}

// ErrClosed is returned by Reload after Close.
var ErrClosed = errors.New("kernel: closed")

// Reload reads the configuration again, as New does: the JSON documents, the
// config file and the environment. It validates all of it with the rules of
// New. It puts it in force at once, or not at all. On any error the
// configuration in force stays. The error, which names the key path, is
// logged and returned, and the reload is counted as invalid. Reload reports
// whether it put a new configuration in force. It returns false and a nil
// error when the document says what is already in force.
//
// A reload applies these per operation, in place, for the invocations that
// arrive after it. They are the resilience policies, whose limiters keep what
// they know ([resilience.Limits.Update]), and TimeoutSeconds. The kernel-wide
// MaxTimeoutSeconds and MaxStragglers apply too. See docs/resilience.md,
// "Changing limits at run time". The startup-only keys keep their value from
// New. They are UseBuiltInMiddleware, Redis, IdempotencyStore, and each
// operation's Idempotency. A reload that changes one logs that it is ignored.
// Reloads are serialised; calls are never blocked by one.
func (k *Kernel) Reload() (bool, error) {
	k.reloadMu.Lock()
	defer k.reloadMu.Unlock()
	if k.closed {
		return false, ErrClosed
	}
	lc, err := k.readLive()
	if err != nil {
		return k.refuseReload(err)
	}
	old := k.live.Load()
	if reflect.DeepEqual(old, lc) {
		k.countReload(reloadUnchanged)
		k.logger.Info("kernel: config reloaded; nothing changed")
		return false, nil
	}
	changes, err := k.changes(old, lc)
	if err != nil {
		return k.refuseReload(err)
	}
	var changed []string
	for _, ch := range changes {
		changed = append(changed, ch.id)
		was := k.custom[ch.id]
		k.custom[ch.id] = ch.custom
		c := k.ops[ch.id]
		if l := k.limits[ch.id]; l != nil {
			p := limitsPolicy(c.desc, ch.policy, ch.stream)
			l.Update(p, append(k.clusterOptions(ch.id, p), ch.custom.opts...)...)
		}
		c.stream.Store(&ch.stream)
		if ch.custom.from != was.from { // built anew: the old ones left the chain
			k.closeCustom(ch.id, was)
		}
		k.ops[ch.id].timeout.Store(int64(ch.policy.Timeout))
		k.ops[ch.id].class.Store(int32(ch.policy.Priority))
	}
	k.live.Store(lc)
	k.applyDependencies(lc.dependencies)
	k.warnUnregistered(lc.policies)
	k.countReload(reloadOK)
	k.logger.Info("kernel: config reloaded", "changed_operations", strings.Join(changed, ","),
		"max_timeout", lc.maxTimeout.String(), "max_stragglers", lc.maxStragglers)
	return true, nil
}

// refuseReload counts and logs a reload refused for err.
func (k *Kernel) refuseReload(err error) (bool, error) {
	k.countReload(reloadInvalid)
	k.logger.Error("kernel: config reload refused; the configuration in force stays",
		"key", keyPath(err), "error", err.Error())
	return false, err
}

// change is what a reload puts in force for one operation.
type change struct {
	id     string
	policy resilience.Policy
	custom customLimits
	stream config.Stream
}

// changes returns the operations whose keys lc changes from old, with their
// limits of your own kinds built. An error refuses the reload before anything
// is applied.
func (k *Kernel) changes(old, lc *liveConfig) ([]change, error) {
	var out []change
	for _, d := range k.registry.All() {
		is := lc.policies.Resolve(d.ID)
		if applied, _ := config.Diff(k.inForce(old, d.ID), is); len(applied) == 0 {
			continue
		}
		c, err := k.buildCustom(lc.policies, d.ID, is.Custom.Limits, k.custom[d.ID])
		if err != nil {
			for _, ch := range out { // refused: the limits built for it never run
				if ch.custom.from != k.custom[ch.id].from {
					k.closeCustom(ch.id, ch.custom)
				}
			}
			return nil, err
		}
		out = append(out, change{id: d.ID, policy: is.Policy, custom: c, stream: is.Stream})
	}
	return out, nil
}

// readLive loads and validates the configuration as New does and returns
// its live part. It logs the startup-only keys that changed.
func (k *Kernel) readLive() (*liveConfig, error) {
	conf, err := loadConfig(k.opts)
	if err != nil {
		return nil, err
	}
	settings, resRaw, err := parseSettings(conf.Get("Sundial" + delimiter + "Kernel"))
	if err != nil {
		return nil, err
	}
	lc := &liveConfig{maxTimeout: settings.MaxTimeout, maxStragglers: settings.MaxStragglers, dependencies: settings.Dependencies}
	if k.settings.UseBuiltInMiddleware {
		if lc.policies, err = parsePolicies(resRaw, resilienceSection); err != nil {
			return nil, err
		}
		if err := k.needRedis(k.clustered(lc.policies)); err != nil {
			return nil, err
		}
	}
	k.warnStartupOnly(lc.policies)
	if k.store.Load() == nil && k.rdb != nil && len(k.clustered(lc.policies)) > 0 {
		k.startStore()
	}
	for _, key := range startupOnly {
		var was, is any
		switch key {
		case "UseBuiltInMiddleware":
			was, is = k.settings.UseBuiltInMiddleware, settings.UseBuiltInMiddleware
		case "Redis":
			was, is = k.settings.Redis, settings.Redis
		case "IdempotencyStore":
			was, is = k.settings.IdempotencyStore, settings.IdempotencyStore
		}
		if !reflect.DeepEqual(was, is) {
			k.logger.Warn("kernel: Sundial.Kernel."+key+" changed; it is read at start-up only and the change is ignored until a restart",
				"key", "Sundial.Kernel."+key)
		}
	}
	return lc, nil
}

// inForce returns what the keys of the operation id hold in force. The
// reloadable ones are as lc says. The start-up only ones (Idempotency) are as
// New read them.
func (k *Kernel) inForce(lc *liveConfig, id string) config.Target {
	t := lc.policies.Resolve(id)
	return config.Target{Policy: t.Policy, Idempotency: k.idemPol[id], Custom: k.customTarget(id), Stream: t.Stream}
}

// warnStartupOnly logs, for each operation, the keys of its policy that the
// policies ps change but that are read at start-up only. Their change is
// ignored until a restart.
func (k *Kernel) warnStartupOnly(ps policies) {
	lc := k.live.Load()
	for _, d := range k.registry.All() {
		_, ignored := config.Diff(k.inForce(lc, d.ID), ps.Resolve(d.ID))
		for _, key := range config.TopLevel(ignored) {
			k.logger.Warn("kernel: Sundial.Kernel.Resilience.Operations."+d.ID+"."+key+" changed; it is read at start-up only and the change is ignored until a restart",
				"operation", d.ID)
		}
	}
}

// keyPath returns the key path a configuration error names. It returns ""
// when the error names none, eg a JSON syntax error. The errors of New and
// Reload read "kernel: <path>: <what is wrong>".
func keyPath(err error) string {
	msg := strings.TrimPrefix(err.Error(), "kernel: ")
	path, _, ok := strings.Cut(msg, ": ")
	if !ok || !strings.HasPrefix(path, "Sundial.") {
		return ""
	}
	return path
}

func (k *Kernel) countReload(result string) {
	for i, r := range reloadResults {
		if r == result {
			k.reloads[i].Add(1)
		}
	}
	k.tel.ConfigReloaded(result)
}

// warnUnregistered warns of overrides for operations this kernel does not
// serve. They are allowed, as one config file may serve several services. But
// most likely a typo leaves a limit unapplied.
func (k *Kernel) warnUnregistered(ps policies) {
	for _, id := range ps.operationIDs() {
		if _, ok := k.registry.Lookup(id); !ok {
			k.logger.Warn("kernel: Sundial.Kernel.Resilience.Operations."+id+": no operation with this ID is registered; its policy applies to nothing",
				"operation", id)
		}
	}
}

// defaultWatchDebounce is how long WatchConfig waits after the last change
// of the config file before it reloads, when given 0.
const defaultWatchDebounce = 100 * time.Millisecond

// errNoConfigFile is returned by WatchConfig for a kernel made without
// WithConfigFile.
var errNoConfigFile = errors.New("kernel: WatchConfig: no config file (WithConfigFile)")

// WatchConfig reloads the configuration (Reload) whenever the config file
// given to WithConfigFile changes, until ctx ends. It returns then, with its
// watcher stopped. Run it on a goroutine of its own.
//
// It watches the file's directory (koanf's file provider, on fsnotify). So
// every way of replacing the file is seen. An editor may write a temporary
// file and rename it over the file, or write in place. A Kubernetes ConfigMap
// swaps the ..data symlink. A removal may be followed by a new file. The
// provider stops watching at a removal; WatchConfig arms it again as soon as
// the file is back, and reloads. Changes are debounced. The reload runs once
// the file has been quiet for debounce (0: 100 ms), so a burst of events
// makes one reload. A file that cannot be watched on the first try is an
// error.
func (k *Kernel) WatchConfig(ctx context.Context, debounce time.Duration) error {
	path := k.opts.configFile
	if path == "" {
		return errNoConfigFile
	}
	if debounce <= 0 {
		debounce = defaultWatchDebounce
	}
	changed := make(chan struct{}, 1)
	stopped := make(chan error, 1)
	arm := func() (*file.File, error) {
		f := file.Provider(path)
		err := f.Watch(func(_ any, err error) {
			if err != nil {
				select {
				case stopped <- err:
				default:
				}
				return
			}
			select {
			case changed <- struct{}{}:
			default:
			}
		})
		if err != nil {
			return nil, fmt.Errorf("kernel: WatchConfig %s: %w", path, err)
		}
		return f, nil
	}
	f, err := arm()
	if err != nil {
		return err
	}
	k.logger.Info("kernel: watching the config file", "file", path)
	defer func() {
		if f != nil {
			_ = f.Unwatch()
		}
	}()
	quiet := time.NewTimer(debounce)
	quiet.Stop()
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			quiet.Reset(debounce)
		case <-quiet.C:
			if _, err := k.Reload(); errors.Is(err, ErrClosed) {
				return nil
			}
		case err := <-stopped:
			// The provider stopped for good (the file was removed, or its
			// symlink broke): arm a new one once the file is back, and
			// reload, since it may have changed meanwhile.
			k.logger.Info("kernel: config watch interrupted; re-arming", "file", path, "reason", err.Error())
			_ = f.Unwatch()
			f = nil
			for f == nil {
				if f, err = arm(); err == nil {
					break
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(debounce):
				}
			}
			quiet.Reset(debounce)
		}
	}
}
