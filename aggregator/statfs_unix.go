//go:build linux || darwin || freebsd

package aggregator

import (
	"os"
	"syscall"
)

// diskSpace is the space available to unprivileged users on the file
// system holding path, and that file system's size.
func diskSpace(path string) (free, size uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, 0, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	return uint64(st.Bavail) * uint64(st.Bsize), uint64(st.Blocks) * uint64(st.Bsize), nil
}
