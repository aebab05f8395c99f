package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aerie-dev/aerie/schema"
)

// optionalFloat is a float flag that remembers whether it was set, so an
// unset sampling parameter is left to the backend's default.
type optionalFloat struct{ v *float64 }

func (o *optionalFloat) String() string {
	if o.v == nil {
		return ""
	}
	return fmt.Sprint(*o.v)
}

func (o *optionalFloat) Set(s string) error {
	var f float64
	if _, err := fmt.Sscanf(strings.TrimSpace(s), "%g", &f); err != nil {
		return fmt.Errorf("%q is not a number", s)
	}
	o.v = &f
	return nil
}

// optionalInt is an int flag that remembers whether it was set.
type optionalInt struct{ v *int }

func (o *optionalInt) String() string {
	if o.v == nil {
		return ""
	}
	return strconv.Itoa(*o.v)
}

func (o *optionalInt) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("%q is not an integer", s)
	}
	o.v = &n
	return nil
}

// optionalInt64 is an int64 flag that remembers whether it was set.
type optionalInt64 struct{ v *int64 }

func (o *optionalInt64) String() string {
	if o.v == nil {
		return ""
	}
	return strconv.FormatInt(*o.v, 10)
}

func (o *optionalInt64) Set(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a 64-bit integer", s)
	}
	o.v = &n
	return nil
}

// stringList is a flag given once per value; unset, it is nil.
type stringList struct{ v []string }

func (l *stringList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.v, ",")
}

func (l *stringList) Set(s string) error {
	if s == "" {
		return errors.New("empty: give a non-empty string")
	}
	l.v = append(l.v, s)
	return nil
}

// jsonObject is a flag holding one JSON object, kept canonical (see
// schema.CanonicalObject); unset, it is nil. check, when set, refuses
// objects the flag cannot take.
type jsonObject struct {
	v     json.RawMessage
	check func(json.RawMessage) error
}

func (o *jsonObject) String() string {
	if o == nil {
		return ""
	}
	return string(o.v)
}

func (o *jsonObject) Set(s string) error {
	obj, err := schema.CanonicalObject([]byte(s))
	if err != nil {
		return fmt.Errorf("%w (give one JSON object, quoted for the shell, e.g. '{\"key\": true}')", err)
	}
	if o.check != nil {
		if err := o.check(obj); err != nil {
			return err
		}
	}
	o.v = obj
	return nil
}
