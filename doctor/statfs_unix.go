//go:build linux || darwin || freebsd

package doctor

import (
	"os"
	"syscall"
)

// freeBytes is the space available to unprivileged users on the file
// system holding path.
func freeBytes(path string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}
