package rpcschema

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// This file converts a method's messages to and from the operation's Go
// values.

// EncodeOutput converts the operation's result to the response message.
func (m *Method) EncodeOutput(v any) (*dynamicpb.Message, error) {
	out := dynamicpb.NewMessage(m.out.desc)
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return out, nil
	}
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return out, nil
		}
		rv = rv.Elem()
	}
	if rv.Type() != m.out.goType && !m.out.empty {
		return nil, pipeline.NewError(pipeline.KindUnexpected, pipeline.CodeUnexpected,
			fmt.Sprintf("operation %q returned %v, want %v", m.Desc.ID, rv.Type(), m.out.goType))
	}
	m.out.encode(rv, out)
	return out, nil
}

// DecodeInput converts the request to a new value of the operation's input
// type (a pointer to it, as the handler expects), and checks its
// constraints.
func (m *Method) DecodeInput(req *dynamicpb.Message) (any, error) {
	in, err := m.ConvertInput(req)
	if err != nil {
		return nil, err
	}
	if perr := m.Desc.CheckConstraints(in); perr != nil {
		return nil, perr // the values' validate tags, as over HTTP and the CLI
	}
	return in, nil
}

// ConvertInput converts the request to a new value of the operation's
// input type, a pointer to it. It checks no constraint.
func (m *Method) ConvertInput(req *dynamicpb.Message) (any, error) {
	p := reflect.New(m.Desc.Input)
	target := p.Elem()
	if target.Kind() == reflect.Pointer {
		target.Set(reflect.New(target.Type().Elem()))
		target = target.Elem()
	}
	// The operation's input policy: a field number the schema does not
	// have is an unknown field, the same answer as over HTTP and the CLI.
	if !m.Desc.InputPolicy.AllowUnknownFields {
		if path := unknownField(req.ProtoReflect(), ""); path != "" {
			return nil, operations.UnknownField(path, "")
		}
	}
	if m.in.empty {
		return p.Interface(), nil
	}
	if err := m.in.decode(req.ProtoReflect(), target); err != nil {
		if fe, ok := errors.AsType[*fieldError](err); ok {
			return nil, pipeline.NewError(pipeline.KindValidation, pipeline.CodeValidation, fmt.Sprintf("Field '%s': %s.", fe.Path(), fe.msg)).
				WithDetail("field", fe.Path())
		}
		return nil, pipeline.Wrap(pipeline.KindValidation, pipeline.CodeValidation, "The request message is invalid.", err)
	}
	return p.Interface(), nil
}

// unknownField returns the path of the first field of msg (or of a message
// in it) whose number its descriptor does not have — "#7",
// "lines[1].#7" — or "".
func unknownField(msg protoreflect.Message, path string) string {
	if raw := msg.GetUnknown(); len(raw) > 0 {
		if num, _, n := protowire.ConsumeTag(raw); n > 0 {
			return joinPath(path, "#"+strconv.Itoa(int(num)))
		}
		return joinPath(path, "#?")
	}
	if !holdsMessages(msg.Descriptor()) {
		return "" // no field of msg is a message: no unknown field below it
	}
	var found string
	msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			name, l := joinPath(path, fd.JSONName()), v.List()
			for i := range l.Len() {
				if found = unknownField(l.Get(i).Message(), name+"["+strconv.Itoa(i)+"]"); found != "" {
					return false
				}
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			name := joinPath(path, fd.JSONName())
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				found = unknownField(mv.Message(), joinPath(name, k.String()))
				return found == ""
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			found = unknownField(v.Message(), joinPath(path, fd.JSONName()))
		}
		return found == ""
	})
	return found
}

// holdsMessages reports whether a field of md is a message, a list of
// messages or a map, whose entries are messages. Looking at the descriptor
// alone spares a flat message the walk over its values; most requests are
// flat. The walk's callbacks are the deepest frames a call puts on
// grpc-go's stream goroutine. That goroutine is new for every call, and
// each doubling of its stack copies it.
func holdsMessages(md protoreflect.MessageDescriptor) bool {
	fields := md.Fields()
	for i := range fields.Len() {
		if fields.Get(i).Message() != nil {
			return true
		}
	}
	return false
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// DecodeReply decodes resp into out, a pointer to the output type; a nil out
// discards it.
func (m *Method) DecodeReply(resp *dynamicpb.Message, out any) error {
	if out == nil || m.out.empty {
		return nil
	}
	ov := reflect.ValueOf(out)
	if ov.Kind() != reflect.Pointer || ov.IsNil() || ov.Elem().Type() != m.out.goType {
		return fmt.Errorf("Call %q: out of type %T, want *%v", m.Desc.ID, out, m.out.goType)
	}
	return m.out.decode(resp, ov.Elem())
}

// Request returns the request message of a call with input in: a value of
// the operation's input type, a pointer to one, or nil (an empty message).
func (m *Method) Request(in any) (*dynamicpb.Message, error) {
	req := dynamicpb.NewMessage(m.in.desc)
	v := reflect.ValueOf(in)
	if !v.IsValid() || m.in.empty {
		return req, nil
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return req, nil
		}
		v = v.Elem()
	}
	if v.Type() != m.in.goType {
		return nil, fmt.Errorf("Call %q: input of type %T, want %v", m.Desc.ID, in, m.in.goType)
	}
	m.in.encode(v, req)
	return req, nil
}
