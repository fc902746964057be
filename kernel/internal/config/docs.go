package config

import (
	"fmt"
	"strings"
)

//go:generate go test -run TestDocsFile -update .

// docsIntro opens docs/policy-keys.md.
const docsIntro = `# Resilience policy keys

<!-- Generated from the table in kernel/internal/config/keys.go; do not edit.
     Rewrite with: go test ./kernel/internal/config -run TestDocsFile -update -->

The section ` + "`Sundial.Kernel.Resilience`" + ` configures the resilience policy of every operation.
Its root holds the kernel-wide defaults.
Its ` + "`Operations`" + ` object maps an operation ID to an object of the same keys, which overrides them.
An inherited key that an operation does not set takes the root's value.
An operation without an ` + "`Idempotency`" + ` object takes the root's; with neither, it takes no idempotency keys.
The keys of the ` + "`Idempotency`" + ` and ` + "`Adaptive`" + ` objects are not inherited one by one: an operation's object replaces the root's whole.
Its defaults apply to the keys it does not set.
The keys of the ` + "`Stream`" + ` object apply to streaming operations only ([Streaming operations](streaming.md)).
A key that a reload applies takes effect for the calls that arrive after it.
A start-up only key keeps its value until a restart; a reload that changes it logs that it is ignored.
Every error names the full key path, e.g. ` + "`Sundial.Kernel.Resilience.Operations.orders.create.PermitLimit`" + `.

`

// Markdown returns docs/policy-keys.md: a short introduction, then one
// row per key of the table.
func Markdown() string {
	var b strings.Builder
	b.WriteString(docsIntro)
	b.WriteString("| Key | Type | Default | Bounds | Reload | Inherited | Meaning |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, k := range Keys {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s |\n", k.Name, cell(k.Type), cell(k.Default),
			cell(k.Bounds), yesNo(k.Reloadable, "applied", "start-up only"), yesNo(k.Inherited, "yes", "no"), cell(k.Doc))
	}
	b.WriteString(dependencyDocs)
	b.WriteString("| Key | Type | Default | Bounds | Meaning |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, k := range DependencyKeys {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", k.Name, cell(k.Type), cell(k.Default), cell(k.Bounds), cell(k.Doc))
	}
	return b.String()
}

// dependencyDocs opens the table of DependencyKeys.
const dependencyDocs = `
## Dependencies

The object ` + "`Sundial.Kernel.Dependencies`" + ` maps a dependency's name to its outbound policy ([Outbound calls](outbound.md)).
` + "`kernel.Kernel.Dependency(name)`" + ` returns it, for the HTTP transport, the gRPC interceptor or your own client.
Every key is applied by a reload; an unset key takes its default.
Every error names the full key path, e.g. ` + "`Sundial.Kernel.Dependencies.billing.Backoff.MaxMs`" + `.

`

func yesNo(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

// cell escapes the pipes of a table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
