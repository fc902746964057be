// Package cliadapter serves Sundial operations as cobra commands. It maps
// outcomes to process exit codes.
//
// AddCommands turns every registered operation into a command:
// "orders.create" becomes "<root> orders create". The command's flags come
// from the operation's input fields. --input gives a whole JSON input,
// --timeout the caller's deadline and --output the result's format.
//
// The adapter decodes and encodes only. A command hands the kernel what the
// caller sent: the decoded input, the --timeout deadline, and a context
// that SIGINT and SIGTERM cancel. It calls kernel.Op.Handle with
// protocol CLI. So a CLI call passes the same stages, limits and deadline
// rules as an HTTP or gRPC one, and is observed the same way. The outcome
// comes back by the deadline whatever the handler does. Inputs and flags
// that do not decode go to the kernel as rejections (kernel.Op.Reject).
// So they are observed too.
//
// Execute runs the command tree and returns the exit code of the outcome
// table (ExitCodeFor). It is 7 for TIMEOUT, 8 for CANCELLED, and 2 for
// VALIDATION and usage errors.
package cliadapter
