package main

import (
	"fmt"
	"os"

	"github.com/aerie-dev/aerie/fsmode"
)

// umaskFlag is --umask: the process umask, set once when the flags are
// parsed (see parseFlags), before the command creates anything. Its
// default is AERIE_UMASK, or fsmode.DefaultUmask when that is unset; a
// bad AERIE_UMASK is reported when the flag is not given.
type umaskFlag struct {
	mask   int
	envErr error
}

func newUmaskFlag() *umaskFlag {
	u := &umaskFlag{mask: fsmode.DefaultUmask}
	if v := os.Getenv("AERIE_UMASK"); v != "" {
		if err := u.Set(v); err != nil {
			u.envErr = fmt.Errorf("AERIE_UMASK: %w", err)
		}
	}
	return u
}

func (u *umaskFlag) String() string {
	if u == nil {
		return fsmode.FormatUmask(fsmode.DefaultUmask)
	}
	return fsmode.FormatUmask(u.mask)
}

func (u *umaskFlag) Set(s string) error {
	m, err := fsmode.ParseUmask(s)
	if err != nil {
		return err
	}
	u.mask, u.envErr = m, nil
	return nil
}
