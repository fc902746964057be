// Package cliadapter serves Sundial operations as cobra commands and maps
// outcomes to process exit codes.
//
// AddCommands turns every registered operation into a command —
// "orders.create" becomes "<root> orders create" — whose flags are derived
// from the operation's input fields, with --input for a whole JSON input,
// --timeout for the invocation's deadline and --output for the result's
// format. The command builds an invocation (protocol CLI, parent context
// cancelled by SIGINT/SIGTERM) and runs it through the kernel, so a CLI call
// passes the same stages, limits and deadline rules as an HTTP or gRPC one.
// Execute runs the command tree and returns the exit code of DESIGN.md's
// outcome table (ExitCodeFor): 7 for TIMEOUT, 8 for CANCELLED, 2 for
// VALIDATION and usage errors.
package cliadapter
