package kernel

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	kjson "github.com/knadh/koanf/parsers/json"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"

	"github.com/sundial-go/sundial/kernel/internal/config"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// delimiter separates key path segments inside the kernel's koanf
// instance. It is not "." because operation IDs contain dots
// ("orders.create") and must stay one key; a config key containing it is
// refused.
const delimiter = "::"

// defaultMaxTimeout is Sundial.Kernel.MaxTimeoutSeconds when the config does
// not set it. No inbound deadline, however far in the future, lets a call run
// longer.
const defaultMaxTimeout = 5 * time.Minute

// parsedSettings is the parsed section Sundial.Kernel (minus Resilience).
type parsedSettings struct {
	// MaxTimeout caps every invocation's deadline (key MaxTimeoutSeconds,
	// number > 0, default 300).
	MaxTimeout time.Duration
	// UseBuiltInMiddleware registers the DeadlineMiddleware and the
	// Limits (key UseBuiltInMiddleware, boolean, default
	// true). When false, the Resilience section is not read.
	UseBuiltInMiddleware bool
	// MaxStragglers bounds the invocations still running after their answer left
	// at the deadline. Those are handlers that ignore their context. The key is
	// MaxStragglers, an integer > 0, by default defaultMaxStragglers. While that
	// many run, every new call is answered 503 KERNEL_UNAVAILABLE_005 and runs
	// nothing. Its retry-after is 1 second.
	MaxStragglers int
	// Redis is the store of cluster-scoped limits (key Redis, object; see
	// redisSettings and docs/cluster.md); nil when not configured.
	Redis *redisSettings
	// IdempotencyStore bounds the in-process store of idempotency records
	// (key IdempotencyStore, object; see idempotencyStoreSettings and
	// docs/idempotency.md); nil when not configured.
	IdempotencyStore *idempotencyStoreSettings
	// Dependencies are the outbound policies by dependency name (key
	// Dependencies; see config.DependencyKeys and docs/outbound.md).
	Dependencies map[string]outbound.Policy
}

// defaultMaxStragglers is Sundial.Kernel.MaxStragglers when the config
// does not set it.
const defaultMaxStragglers = 1000

// loadConfig builds the koanf instance: embedded/default JSON, then the
// config file, then environment overrides.
func loadConfig(o *options) (*koanf.Koanf, error) {
	k := koanf.New(delimiter)
	for _, b := range o.configJSON {
		if err := checkDocument(b, "config"); err != nil {
			return nil, err
		}
		if err := k.Load(rawbytes.Provider(b), kjson.Parser()); err != nil {
			return nil, fmt.Errorf("kernel: config: %w", err)
		}
	}
	if o.configFile != "" {
		b, err := readConfigFile(o.configFile)
		if err == nil {
			err = validDocument(b)
		}
		if err == nil {
			err = k.Load(rawbytes.Provider(b), kjson.Parser())
		}
		if err != nil {
			return nil, &fs.PathError{Op: configFileOp, Path: o.configFile, Err: err}
		}
	}
	if o.envPrefix != "" {
		prefix := o.envPrefix
		p := env.Provider(delimiter, env.Opt{
			Prefix:        prefix,
			EnvironFunc:   o.environ,
			TransformFunc: func(name, value string) (string, any) { return envKey(k, prefix, name), envValue(value) },
		})
		if err := k.Load(p, nil); err != nil {
			return nil, fmt.Errorf("kernel: environment: %w", err)
		}
	}
	return k, nil
}

// knownNames are canonical spellings that environment variable names are
// mapped to, case-insensitively. The kernel's keys come first, then those of
// the Resilience section (its table, kernel/internal/config).
var knownNames = slices.Concat([]string{
	"Sundial", "Kernel", "Resilience", "MaxTimeoutSeconds", "MaxStragglers", "UseBuiltInMiddleware",
	"Redis", "Address", "DB", "Username", "PasswordEnv", "TLS", "ServerName", "CAFile", "PoolSize", "KeyPrefix",
	"IdempotencyStore", "MaxRecords", "MaxBytes",
}, config.Names(), config.DependencyNames())

// envKey maps SUNDIAL_KERNEL__RESILIENCE__OPERATIONS__ORDERS_CREATE__PERMITLIMIT
// to Sundial::Kernel::Resilience::Operations::orders.create::PermitLimit.
// Segments are separated by "__"; each is matched case-insensitively
// against the known key names and the keys already loaded; the segment
// after Operations is an operation ID, lower-cased, with "_" for ".".
func envKey(k *koanf.Koanf, prefix, name string) string {
	rest := strings.TrimPrefix(name, prefix)
	if rest == "" {
		return ""
	}
	segs := strings.Split(rest, "__")
	out := make([]string, 0, len(segs)+1)
	out = append(out, "Sundial")
	for i, s := range segs {
		if s == "" {
			return ""
		}
		if i > 0 && out[len(out)-1] == "Operations" {
			out = append(out, strings.ReplaceAll(strings.ToLower(s), "_", "."))
			continue
		}
		out = append(out, canonical(k, strings.Join(out, delimiter), s))
	}
	return strings.Join(out, delimiter)
}

func canonical(k *koanf.Koanf, parent, s string) string {
	for _, n := range knownNames {
		if strings.EqualFold(n, s) {
			return n
		}
	}
	if m, ok := k.Get(parent).(map[string]any); ok {
		for n := range m {
			if strings.EqualFold(n, s) {
				return n
			}
		}
	}
	return s
}

// envValue parses an environment value as a JSON scalar ("5", "true",
// "1.5"), falling back to the plain string.
func envValue(v string) any {
	var x any
	if err := json.Unmarshal([]byte(v), &x); err == nil {
		switch x.(type) {
		case float64, bool:
			return x
		}
	}
	return v
}

// parseSettings validates the section Sundial.Kernel. It returns the
// Resilience section unparsed (parsePolicies reads it).
func parseSettings(raw any) (parsedSettings, any, error) {
	s := parsedSettings{MaxTimeout: defaultMaxTimeout, UseBuiltInMiddleware: true, MaxStragglers: defaultMaxStragglers}
	if raw == nil {
		return s, nil, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return s, nil, fmt.Errorf("kernel: Sundial.Kernel: want an object, got %T", raw)
	}
	for _, key := range slices.Sorted(maps.Keys(m)) {
		path := "Sundial.Kernel." + key
		i := slices.IndexFunc(kernelSettings, func(ks kernelSetting) bool { return ks.name == key })
		if i < 0 {
			return s, nil, fmt.Errorf("kernel: %s: unknown key (known keys: %s)", path, strings.Join(kernelKeys, ", "))
		}
		if parse := kernelSettings[i].parse; parse != nil {
			if err := parse(&s, m[key], path); err != nil {
				return s, nil, err
			}
		}
	}
	return s, m["Resilience"], nil
}

// kernelSetting is a key of Sundial.Kernel and its parser (nil: read
// elsewhere).
type kernelSetting struct {
	name  string
	parse func(s *parsedSettings, v any, path string) error
}

// kernelSettings are the keys of Sundial.Kernel, in the order error
// messages list them.
var kernelSettings = []kernelSetting{
	{"MaxTimeoutSeconds", parseMaxTimeout},
	{"MaxStragglers", parseMaxStragglers},
	{"UseBuiltInMiddleware", parseUseBuiltIn},
	{"Redis", func(s *parsedSettings, v any, path string) (err error) {
		s.Redis, err = parseRedis(v, path)
		return err
	}},
	{"IdempotencyStore", func(s *parsedSettings, v any, path string) (err error) {
		s.IdempotencyStore, err = parseIdempotencyStore(v, path)
		return err
	}},
	{"Resilience", nil},
	{config.DependenciesKey, func(s *parsedSettings, v any, path string) (err error) {
		s.Dependencies, err = config.ParseDependencies(v, path)
		return err
	}},
}

var kernelKeys = func() []string {
	names := make([]string, len(kernelSettings))
	for i, ks := range kernelSettings {
		names[i] = ks.name
	}
	return names
}()

func parseMaxTimeout(s *parsedSettings, v any, path string) error {
	f, ok := v.(float64)
	if !ok {
		return fmt.Errorf("kernel: %s: want a number of seconds, got %T", path, v)
	}
	if math.IsNaN(f) || f <= 0 || f > 1e9 {
		return fmt.Errorf("kernel: %s: must be greater than 0 and at most 1e9, got %v", path, f)
	}
	s.MaxTimeout = time.Duration(f * float64(time.Second))
	return nil
}

func parseMaxStragglers(s *parsedSettings, v any, path string) error {
	f, ok := v.(float64)
	if !ok {
		return fmt.Errorf("kernel: %s: want an integer, got %T", path, v)
	}
	if f != math.Trunc(f) || f < 1 || f > math.MaxInt32 {
		return fmt.Errorf("kernel: %s: must be an integer from 1 to %d, got %v", path, math.MaxInt32, f)
	}
	s.MaxStragglers = int(f)
	return nil
}

func parseUseBuiltIn(s *parsedSettings, v any, path string) error {
	b, ok := v.(bool)
	if !ok {
		return fmt.Errorf("kernel: %s: want a boolean, got %T", path, v)
	}
	s.UseBuiltInMiddleware = b
	return nil
}

// checkDocument rejects what koanf would silently reinterpret. That is a
// document that is not a JSON object, or a "Sundial" member that is not an
// object. It is also a key containing the path delimiter: a key
// "Sundial::Kernel" must not stand for the nested section.
func checkDocument(b []byte, what string) error {
	if err := validDocument(b); err != nil {
		return fmt.Errorf("kernel: %s: %w", what, err)
	}
	return nil
}

// validDocument is checkDocument without the name of the document.
func validDocument(b []byte) error {
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	root, ok := doc.(map[string]any)
	if !ok {
		return errors.New("the document must be a JSON object")
	}
	if v, ok := root["Sundial"]; ok {
		if _, isObj := v.(map[string]any); !isObj {
			return errors.New("Sundial: want an object")
		}
	}
	return checkKeys(root, "")
}

func checkKeys(v any, path string) error {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	for _, key := range slices.Sorted(maps.Keys(m)) {
		p := key
		if path != "" {
			p = path + "." + key
		}
		if strings.Contains(key, delimiter) {
			return fmt.Errorf("%s: keys must not contain %q", p, delimiter)
		}
		if err := checkKeys(m[key], p); err != nil {
			return err
		}
	}
	return nil
}

// MaxConfigFileBytes bounds a file the configuration reads: the config
// file (at New, at each Reload and so for WatchConfig) and Redis's
// TLS.CAFile. A larger file is refused; it is never read further.
const MaxConfigFileBytes = 4 << 20

// configFileOp is the Op of the *fs.PathError of New and Reload for a
// config file that cannot be read or is not a valid document.
const configFileOp = "kernel: config file"

// readConfigFile reads the file at path, which must be a regular file of at
// most MaxConfigFileBytes. A device, a pipe, a socket or a directory is
// refused before it is opened. So none blocks or streams without end. A file
// that grows past the bound while being read is refused too.
func readConfigFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, unwrapPath(err)
	}
	if err := checkConfigFile(fi); err != nil {
		return nil, err
	}
	// O_NONBLOCK: a FIFO put in path's place since the Stat does not
	// block the open; the check below then refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, unwrapPath(err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil { // the file opened, if path was replaced meanwhile
		return nil, unwrapPath(err)
	}
	if err := checkConfigFile(fi); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxConfigFileBytes+1))
	if err != nil {
		return nil, unwrapPath(err)
	}
	if len(b) > MaxConfigFileBytes {
		return nil, errTooLarge
	}
	return b, nil
}

var errTooLarge = fmt.Errorf("larger than %d bytes (kernel.MaxConfigFileBytes)", MaxConfigFileBytes)

// checkConfigFile refuses what readConfigFile must not read.
func checkConfigFile(fi fs.FileInfo) error {
	if t := fi.Mode().Type(); t != 0 {
		return fmt.Errorf("not a regular file but a %s", fileKind(t))
	}
	if fi.Size() > MaxConfigFileBytes {
		return errTooLarge
	}
	return nil
}

// fileKind names a file type for an error message.
func fileKind(t fs.FileMode) string {
	switch {
	case t&fs.ModeDir != 0:
		return "directory"
	case t&fs.ModeCharDevice != 0:
		return "character device"
	case t&fs.ModeDevice != 0:
		return "block device"
	case t&fs.ModeNamedPipe != 0:
		return "named pipe"
	case t&fs.ModeSocket != 0:
		return "socket"
	}
	return "special file"
}

// unwrapPath drops the path an *fs.PathError repeats: the config file's
// own *fs.PathError and the callers name the file already.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
