// Package limitkey checks the keys of a per-key rate limit (a tenant, an
// API key), which come from callers.
package limitkey

import "fmt"

// MaxLen is the longest key, in bytes.
const MaxLen = 128

// Check returns an error when key is longer than MaxLen bytes, or holds a
// control character or a brace. A brace ("{" or "}") would end a Redis
// Cluster hash tag early. Check looks at no more than MaxLen+1 bytes. The
// empty key is valid: calls that bring none share it.
func Check(key string) error {
	if len(key) > MaxLen {
		return fmt.Errorf("longer than %d bytes", MaxLen)
	}
	for i := 0; i < len(key); i++ {
		if b := key[i]; b < 0x20 || b == 0x7f || b == '{' || b == '}' {
			return fmt.Errorf("byte %d is %q: control characters and braces are not allowed", i, b)
		}
	}
	return nil
}
