package kernel

import (
	"reflect"

	"github.com/sundial-go/sundial/operations"
)

var reflectTypeOfValidator = reflect.TypeFor[operations.Validator]()

func reflectPtrTo(t reflect.Type) reflect.Type { return reflect.PointerTo(t) }
