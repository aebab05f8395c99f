//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package lockfile

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// lock takes an exclusive flock on f without waiting. flock locks belong
// to the open file, so two opens in one process exclude each other too.
func lock(f *os.File) error {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return errLocked
	}
	return err
}
