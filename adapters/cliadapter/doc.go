// Package cliadapter serves Sundial operations as cobra commands and maps
// outcomes to process exit codes.
//
// AddCommands turns every registered operation into a command —
// "orders.create" becomes "<root> orders create" — whose flags are derived
// from the operation's input fields, with --input for a whole JSON input,
// --timeout for the caller's deadline and --output for the result's format.
//
// The adapter decodes and encodes only. A command hands the kernel what the
// caller sent (kernel.Op.Handle with protocol CLI: the decoded input,
// the --timeout deadline, a context that SIGINT and SIGTERM cancel), so a
// CLI call passes the same stages, limits and deadline rules as an HTTP or
// gRPC one, and is observed the same way. The outcome comes back by the
// deadline whatever the handler does. Inputs and flags that do not decode
// are handed to the kernel as rejections (kernel.Op.Reject), so they
// are observed too.
//
// Execute runs the command tree and returns the exit code of the outcome
// table (ExitCodeFor): 7 for TIMEOUT, 8 for CANCELLED, 2 for VALIDATION and
// usage errors.
package cliadapter
