package operations

import (
	"fmt"
	"strings"
)

// maxIDLength is the longest operation ID accepted.
const maxIDLength = 128

// ValidateID reports whether id is a well-formed operation ID, and why not.
//
// The grammar (ABNF):
//
//	id      = segment 1*( "." segment )       ; at least two segments
//	segment = lower *( lower / digit / "-" )   ; no trailing "-", no "--"
//	lower   = %x61-7A                          ; a-z
//	digit   = %x30-39                          ; 0-9
//
// and at most 128 bytes. Examples: "orders.create",
// "reports.export", "billing.refund-partial", "inventory.v2.reserve".
// The first segment groups operations (gRPC service, CLI command group); the
// rest names the operation within the group.
func ValidateID(id string) error {
	if id == "" {
		return fmt.Errorf("operations: operation ID is empty")
	}
	if len(id) > maxIDLength {
		return fmt.Errorf("operations: operation ID %q is longer than %d bytes", truncate(id), maxIDLength)
	}
	segments := 0
	start := 0
	for i := 0; i <= len(id); i++ {
		if i < len(id) && id[i] != '.' {
			continue
		}
		if why := validateSegment(id[start:i]); why != "" {
			return fmt.Errorf("operations: malformed operation ID %q: %s", id, why)
		}
		segments++
		start = i + 1
	}
	if segments < 2 {
		return fmt.Errorf("operations: malformed operation ID %q: want at least two dot-separated segments, e.g. %q", id, "orders.create")
	}
	return nil
}

func validateSegment(s string) string {
	if s == "" {
		return "empty segment"
	}
	if c := s[0]; c < 'a' || c > 'z' {
		return fmt.Sprintf("segment %q must start with a lowercase letter a-z", s)
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-':
			if i == len(s)-1 || s[i+1] == '-' {
				return fmt.Sprintf("segment %q has a trailing or doubled '-'", s)
			}
		default:
			return fmt.Sprintf("segment %q has %q; only a-z, 0-9 and '-' are allowed", s, c)
		}
	}
	return ""
}

// GRPCNames returns the gRPC service and method names of operation ID id
// by the convention (see [Descriptor]): its first segment and the rest, in
// PascalCase ("orders.create" -> "Orders", "Create";
// "inventory.v2.reserve" -> "Inventory", "V2Reserve"). The service name
// has no proto package.
func GRPCNames(id string) (service, method string) {
	return pascalCase(group(id)), pascalCase(name(id))
}

// group returns the ID's first segment ("orders" for "orders.create").
func group(id string) string {
	if i := strings.IndexByte(id, '.'); i >= 0 {
		return id[:i]
	}
	return id
}

// name returns the ID without its first segment ("create" for
// "orders.create", "v2.reserve" for "inventory.v2.reserve").
func name(id string) string {
	if i := strings.IndexByte(id, '.'); i >= 0 {
		return id[i+1:]
	}
	return ""
}

// pascalCase converts an ID part to PascalCase: "export-csv" ->
// "ExportCsv", "v2.reserve" -> "V2Reserve".
func pascalCase(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	up := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '.' || c == '-' || c == '_' {
			up = true
			continue
		}
		if up && c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		b.WriteByte(c)
	}
	return b.String()
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
