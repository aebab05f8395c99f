//go:build unix

package hiddenstates

import (
	"errors"
	"os"
	"syscall"
)

// sameFileSystem reports whether a file at path and the directory dir
// are on one file system, where a rename moves a file.
func sameFileSystem(path, dir string) (bool, error) {
	var a, b syscall.Stat_t
	if err := syscall.Stat(path, &a); err != nil {
		return false, err
	}
	if err := syscall.Stat(dir, &b); err != nil {
		return false, err
	}
	return a.Dev == b.Dev, nil
}

// tryShared takes f's lock shared without waiting; false while another
// holds it exclusively.
func tryShared(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

func unlock(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
