package httpadapter

// Unexported codes and deadline helpers that the external tests read.
const (
	CodeMalformedBody    = codeMalformedBody
	CodeWrongType        = codeWrongType
	CodeBodyTooLarge     = codeBodyTooLarge
	CodeBadRequest       = codeBadRequest
	CodeRouteNotFound    = codeRouteNotFound
	CodeMethodNotAllowed = codeMethodNotAllowed
)

// The deadline header parsers and formatters.
var (
	ParseDeadline   = parseDeadline
	ParseTimeoutMs  = parseTimeoutMs
	FormatDeadline  = formatDeadline
	FormatTimeoutMs = formatTimeoutMs
)
