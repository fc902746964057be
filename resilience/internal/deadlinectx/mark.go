package deadlinectx

import "errors"

// Mark records, inside an error, that the time the error reports running
// out was bounded by the invocation's deadline. An error type embeds it
// under an unexported alias; [CallerBound] finds it.
type Mark struct {
	callerBound bool // the time that ran out ended at the invocation's deadline
}

// Marked returns a Mark; callerBound says whether the time ended at the
// invocation's deadline.
func Marked(callerBound bool) Mark { return Mark{callerBound: callerBound} }

func (m Mark) deadlineMark() Mark { return m }

// CallerBound reports whether err holds a Mark of time bounded by the
// invocation's deadline.
// A foreign error whose methods panic while the chain is walked holds
// none; neither does a typed nil.
func CallerBound(err error) (bound bool) {
	defer func() {
		if recover() != nil {
			bound = false
		}
	}()
	m, ok := errors.AsType[interface {
		error
		deadlineMark() Mark
	}](err)
	return ok && m.deadlineMark().callerBound
}
